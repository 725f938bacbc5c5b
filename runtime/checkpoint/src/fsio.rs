//! Filesystem helpers with the durability rules of the crate: atomic small-file writes
//! (temp file, fsync, rename, fsync of the directory), directory fsync, best-effort removal,
//! and classifying a checkpoint directory path (missing, not a directory).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::{io_error, write_error, CheckpointError};
use crate::layout::TEMP_PREFIX;

/// Makes the entries of `dir` (creations, renames, removals) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    #[cfg(unix)]
    {
        let handle = File::open(dir).map_err(|e| io_error("open directory", dir, e))?;
        handle.sync_all().map_err(|e| write_error(dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Writes `bytes` to `dir/name` atomically: `dir/.tmp-name`, fsync, rename, fsync `dir`.
pub(crate) fn atomic_write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), CheckpointError> {
    let temp = dir.join(format!("{TEMP_PREFIX}{name}"));
    let target = dir.join(name);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(e) = result {
        remove_best_effort(&temp);
        return Err(write_error(&temp, e));
    }
    fs::rename(&temp, &target).map_err(|e| {
        remove_best_effort(&temp);
        write_error(&target, e)
    })?;
    sync_dir(dir)
}

/// Removes a file or a directory tree; failures are logged, not returned.
pub(crate) fn remove_best_effort(path: &Path) {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::debug!(path = %path.display(), error = %e, "could not remove");
    }
}

/// The nearest existing ancestor of `path` (or `path` itself) that is not a directory.
pub(crate) fn non_directory_ancestor(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|p| fs::metadata(p).is_ok_and(|m| !m.is_dir()))
        .map(Path::to_path_buf)
}

/// Maps an error from looking at the checkpoint directory `dir` itself.
pub(crate) fn dir_error(dir: &Path, err: io::Error) -> CheckpointError {
    if let Some(path) = non_directory_ancestor(dir) {
        return CheckpointError::NotADirectory {
            dir: dir.to_path_buf(),
            path,
        };
    }
    match err.kind() {
        io::ErrorKind::NotFound => CheckpointError::MissingDirectory {
            path: dir.to_path_buf(),
        },
        _ => io_error("read directory", dir, err),
    }
}
