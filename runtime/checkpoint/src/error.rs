//! [`CheckpointError`] (one variant per condition a user may meet), [`SkippedCheckpoint`]
//! (a checkpoint passed over while reading, with the reason), and the mapping from
//! `std::io::Error` to those variants (disk full, permission, missing directory).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::identity::JobIdentity;

/// Everything that can go wrong while storing or loading checkpoints.
///
/// Every message names the path involved. The type is `Clone` (I/O sources are shared
/// behind an `Arc`) so skipped-checkpoint reasons can be kept and reported later.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// `--resume` named a directory that does not exist.
    #[error("checkpoint directory {} does not exist", .path.display())]
    MissingDirectory { path: PathBuf },

    /// The checkpoint directory, or one of its parents, exists but is not a directory.
    #[error("cannot use {} as checkpoint directory: {} is not a directory", .dir.display(), .path.display())]
    NotADirectory {
        /// The checkpoint directory asked for.
        dir: PathBuf,
        /// The path that exists and is not a directory (`dir` itself or a parent).
        path: PathBuf,
    },

    /// Writing was refused: permission denied or a read-only filesystem.
    #[error("checkpoint path {} is not writable: {source}", .path.display())]
    NotWritable {
        path: PathBuf,
        source: Arc<io::Error>,
    },

    /// The filesystem is full (or the quota is exhausted).
    #[error("disk full while writing {}: {source}", .path.display())]
    DiskFull {
        path: PathBuf,
        source: Arc<io::Error>,
    },

    /// The directory holds checkpoints of another job of the same app.
    #[error(
        "checkpoint directory {} holds checkpoints of {found}, not of {expected}; \
         use another directory, or resume from it",
        .dir.display()
    )]
    AnotherJob {
        dir: PathBuf,
        found: JobIdentity,
        expected: JobIdentity,
    },

    /// The directory holds checkpoints of another app.
    #[error(
        "checkpoint directory {} holds checkpoints of app {found_app:?} (job {found_job:?}), \
         not of app {expected_app:?}",
        .dir.display()
    )]
    AnotherApp {
        dir: PathBuf,
        found_app: String,
        found_job: String,
        expected_app: String,
    },

    /// A file's (or the manifest's) content does not match its recorded checksum.
    #[error(
        "checkpoint file {} is corrupt: crc32 {expected:08x} expected, {actual:08x} found",
        .path.display()
    )]
    Corrupt {
        path: PathBuf,
        expected: u32,
        actual: u32,
    },

    /// A file's size does not match the size the manifest records.
    #[error(
        "checkpoint file {} has {actual_bytes} bytes, the manifest says {expected_bytes} \
         (truncated or overwritten)",
        .path.display()
    )]
    Truncated {
        path: PathBuf,
        expected_bytes: u64,
        actual_bytes: u64,
    },

    /// A file the manifest lists is not on disk.
    #[error("checkpoint file {} is missing", .path.display())]
    MissingFile { path: PathBuf },

    /// A checkpoint directory has no manifest: its write never committed.
    #[error("checkpoint {} is incomplete: it has no manifest", .path.display())]
    Incomplete { path: PathBuf },

    /// The manifest cannot be parsed or says something impossible.
    #[error("bad checkpoint manifest {}: {reason}", .path.display())]
    BadManifest { path: PathBuf, reason: String },

    /// No checkpoint in the directory passed verification.
    #[error("no complete checkpoint in {}: {}", .dir.display(), skipped_summary(.skipped))]
    NoCompleteCheckpoint {
        dir: PathBuf,
        /// Why each checkpoint present was passed over, newest first.
        skipped: Vec<SkippedCheckpoint>,
    },

    /// A file name given to the writer is not a simple relative name.
    #[error("bad checkpoint file name {name:?}: {reason}")]
    BadFileName { name: String, reason: &'static str },

    /// `read` asked for a file the checkpoint does not contain.
    #[error("checkpoint {seq} has no file named {name:?}")]
    NotInCheckpoint { seq: u64, name: String },

    /// `keep` was zero: at least the newest checkpoint must be kept.
    #[error("the number of checkpoints to keep must be at least 1")]
    KeepZero,

    /// The reader handed to `write_file_from` failed.
    #[error("reading the data for checkpoint file {name:?} failed: {source}")]
    Source {
        name: String,
        source: Arc<io::Error>,
    },

    /// Any other I/O failure.
    #[error("cannot {op} {}: {source}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: Arc<io::Error>,
    },
}

/// A checkpoint passed over while looking for the newest complete one.
#[derive(Debug, Clone)]
pub struct SkippedCheckpoint {
    /// Its sequence number (from its directory name).
    pub seq: u64,
    /// Its directory.
    pub path: PathBuf,
    /// Why it was not used.
    pub reason: CheckpointError,
}

impl fmt::Display for SkippedCheckpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "checkpoint {}: {}", self.seq, self.reason)
    }
}

fn skipped_summary(skipped: &[SkippedCheckpoint]) -> String {
    if skipped.is_empty() {
        return "it holds no checkpoints".to_owned();
    }
    let reasons: Vec<String> = skipped.iter().map(ToString::to_string).collect();
    format!("{} skipped ({})", skipped.len(), reasons.join("; "))
}

/// Maps an error from writing, creating or renaming under `path`.
pub(crate) fn write_error(path: &Path, err: io::Error) -> CheckpointError {
    let path = path.to_path_buf();
    match err.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => CheckpointError::DiskFull {
            path,
            source: Arc::new(err),
        },
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            CheckpointError::NotWritable {
                path,
                source: Arc::new(err),
            }
        }
        _ => CheckpointError::Io {
            op: "write",
            path,
            source: Arc::new(err),
        },
    }
}

/// Maps any other error from operation `op` on `path`.
pub(crate) fn io_error(op: &'static str, path: &Path, err: io::Error) -> CheckpointError {
    CheckpointError::Io {
        op,
        path: path.to_path_buf(),
        source: Arc::new(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_full_maps_to_disk_full() {
        let err = write_error(Path::new("/x"), io::Error::from(io::ErrorKind::StorageFull));
        assert!(matches!(err, CheckpointError::DiskFull { .. }), "{err}");
    }

    /// A real ENOSPC from the OS (writing to `/dev/full`) maps to `DiskFull`.
    #[test]
    fn dev_full_maps_to_disk_full() {
        use std::io::Write;
        let Ok(mut full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            println!("skipped: /dev/full is not available here");
            return;
        };
        let err = full.write_all(&[0u8; 4096]).and_then(|()| full.flush());
        let err = err.expect_err("writing to /dev/full must fail");
        let mapped = write_error(Path::new("/dev/full"), err);
        assert!(
            matches!(mapped, CheckpointError::DiskFull { .. }),
            "{mapped}"
        );
        assert!(mapped.to_string().contains("/dev/full"), "{mapped}");
    }

    #[test]
    fn permission_maps_to_not_writable() {
        let err = write_error(
            Path::new("/x"),
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(matches!(err, CheckpointError::NotWritable { .. }), "{err}");
    }

    #[test]
    fn no_complete_message_lists_reasons() {
        let err = CheckpointError::NoCompleteCheckpoint {
            dir: PathBuf::from("/ck"),
            skipped: vec![SkippedCheckpoint {
                seq: 3,
                path: PathBuf::from("/ck/ckpt-3"),
                reason: CheckpointError::MissingFile {
                    path: PathBuf::from("/ck/ckpt-3/a"),
                },
            }],
        };
        let msg = err.to_string();
        assert!(msg.contains("/ck") && msg.contains("1 skipped") && msg.contains("/ck/ckpt-3/a"));
    }
}
