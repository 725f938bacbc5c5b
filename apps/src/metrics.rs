//! Metrics files: one JSON object per line, flushed as each is written so that a crashed or
//! interrupted run keeps every line it reported.

use anyhow::{Context, Result};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A JSON-lines writer shared by the threads that report.
pub struct MetricsWriter {
    path: PathBuf,
    out: Mutex<BufWriter<File>>,
    /// The first error of [`MetricsWriter::record`], for the run to report at its end.
    first_error: Mutex<Option<anyhow::Error>>,
}

impl MetricsWriter {
    /// Creates (or truncates) `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path)
            .with_context(|| format!("cannot create metrics file {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            out: Mutex::new(BufWriter::new(file)),
            first_error: Mutex::new(None),
        })
    }

    /// Appends one record from a callback that cannot fail (an observer): an error is kept
    /// (the first one) for [`MetricsWriter::take_error`] instead of being returned.
    pub fn record<T: Serialize>(&self, record: &T) {
        if let Err(e) = self.write(record) {
            self.first_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
    }

    /// The first error [`MetricsWriter::record`] met, if any.
    pub fn take_error(&self) -> Result<()> {
        match self
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Appends one record as a line.
    pub fn write<T: Serialize>(&self, record: &T) -> Result<()> {
        let line = serde_json::to_string(record)?;
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .with_context(|| format!("cannot write metrics file {}", self.path.display()))
    }
}
