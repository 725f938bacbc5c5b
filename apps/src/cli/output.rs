//! What `harp run` shows and writes while a job runs: the apps' per-iteration lines, an
//! optional progress bar under them, the `--metrics-out` file, and the job's events (scale
//! events, injected faults, recoveries), which go to both as they happen.
//!
//! Each app's observer (`MlrObserver`, `CnnObserver`, ...) is implemented on [`RunOutput`]
//! in the app's `run_*.rs`, which only decides what a line says.

use super::ClusterArgs;
use crate::metrics::MetricsWriter;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::sync::Arc;

/// The terminal and the metrics file of one `harp run`.
pub(super) struct RunOutput {
    /// `None`: lines only (no bar, or `--quiet`).
    bar: Option<ProgressBar>,
    metrics: Option<MetricsWriter>,
}

impl RunOutput {
    /// Lines on stderr, no progress bar; the metrics file `--metrics-out` names, if any.
    pub(super) fn lines(cluster: &ClusterArgs) -> Result<Arc<Self>> {
        Ok(Arc::new(Self {
            bar: None,
            metrics: metrics_file(cluster)?,
        }))
    }

    /// A progress bar counting `unit` (its length set later by [`Self::set_length`]) with
    /// the lines printed above it; lines only when `quiet`.
    pub(super) fn with_bar(cluster: &ClusterArgs, quiet: bool, unit: &str) -> Result<Arc<Self>> {
        let bar = (!quiet).then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{{spinner}} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} ({{per_sec}})"
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        Ok(Arc::new(Self {
            bar,
            metrics: metrics_file(cluster)?,
        }))
    }

    pub(super) fn set_length(&self, length: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(length);
        }
    }

    /// One more unit done.
    pub(super) fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Prints `line` on stderr (above the bar when one is drawn).
    pub(super) fn line(&self, line: String) {
        match &self.bar {
            Some(bar) if !bar.is_hidden() => bar.println(line),
            // A bar that is not drawn (stderr is not a terminal: a log file, a pipe) drops
            // its `println`s, so the line goes straight to stderr.
            _ => eprintln!("{line}"),
        }
    }

    /// Appends `record` to the metrics file, if there is one; a write error is reported by
    /// [`Self::finish`].
    pub(super) fn record<T: Serialize>(&self, record: &T) {
        if let Some(w) = &self.metrics {
            w.record(record);
        }
    }

    /// Something happened in the job (a node joined or left, a fault struck, a server or a
    /// worker node was recovered, a consistent checkpoint was due, the job resumed from
    /// one): a line (or two), and a record in the metrics file.
    pub(super) fn job_event(&self, event: &harp::JobEvent) {
        use super::scar_report::{fault_line, recovery_line, worker_recovery_line};
        use harp::JobEvent;
        match event {
            JobEvent::Scale(e) => {
                self.line(scale_line(e));
                self.record(e);
            }
            JobEvent::Fault(f) => {
                self.line(fault_line(f));
                self.record(f);
            }
            JobEvent::ServerRecovered(r) => {
                self.line(recovery_line(r));
                self.record(&serde_json::json!({ "event": "recovery", "report": r }));
            }
            JobEvent::WorkerRecovered(r) => {
                self.line(worker_recovery_line(r));
                self.record(&serde_json::json!({ "event": "worker_recovery", "report": r }));
            }
            JobEvent::Checkpoint(c) => {
                self.line(super::checkpoints::checkpoint_line(c));
                self.record(&serde_json::json!({ "event": "checkpoint", "checkpoint": c }));
            }
            JobEvent::Resumed(r) => {
                for line in super::checkpoints::resumed_lines(r) {
                    self.line(line);
                }
                self.record(&serde_json::json!({ "event": "resumed", "from": r }));
            }
        }
    }

    pub(super) fn metrics(&self) -> Option<&MetricsWriter> {
        self.metrics.as_ref()
    }

    /// The job has ended: clears the bar and reports the first failed metrics write.
    pub(super) fn finish(&self) -> Result<()> {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        match &self.metrics {
            Some(w) => w
                .take_error()
                .context("cannot write the metrics file (--metrics-out)"),
            None => Ok(()),
        }
    }
}

fn metrics_file(cluster: &ClusterArgs) -> Result<Option<MetricsWriter>> {
    cluster
        .metrics_out
        .as_deref()
        .map(MetricsWriter::create)
        .transpose()
}

/// A node joined or left (across processes): the line printed for it.
fn scale_line(e: &harp::ScaleEvent) -> String {
    format!(
        "scale: {} of node {} {} in {:.3}s ({} executors, {} shards, {} bytes moved)",
        e.cause,
        e.node.map_or("?".to_string(), |n| n.to_string()),
        if e.ok { "done" } else { "failed" },
        e.duration_s,
        e.report.executors_moved,
        e.report.shards_moved,
        e.report.shard_bytes_moved
    )
}
