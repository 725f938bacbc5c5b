//! Writing one checkpoint: [`CheckpointWriter`] (a temporary directory that becomes
//! `ckpt-<seq>` on [`commit`](CheckpointWriter::commit)) and [`FileWriter`] (one streamed
//! file, checksummed while written, fsynced and renamed into place on `finish`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{write_error, CheckpointError};
use crate::fsio::{atomic_write, remove_best_effort, sync_dir};
use crate::layout::{
    checkpoint_dir_name, unique_suffix, validate_file_name, MANIFEST_FILE, TEMP_PREFIX,
};
use crate::manifest::{self, CheckpointInfo, FileEntry, Manifest, MANIFEST_FORMAT};
use crate::store::CheckpointStore;

const BUFFER_BYTES: usize = 1 << 20;

/// A checkpoint being written. Nothing is visible to readers until [`commit`] succeeds;
/// dropping the writer without committing removes what it wrote (best effort).
///
/// [`commit`]: CheckpointWriter::commit
#[derive(Debug)]
pub struct CheckpointWriter {
    store: CheckpointStore,
    seq: u64,
    temp_dir: PathBuf,
    files: Vec<FileEntry>,
    committed: bool,
    #[cfg(test)]
    fault: Option<io::ErrorKind>,
}

impl CheckpointWriter {
    pub(crate) fn new(store: CheckpointStore, seq: u64) -> Result<Self, CheckpointError> {
        let temp_dir = store.dir().join(format!(
            "{TEMP_PREFIX}{}-{}",
            checkpoint_dir_name(seq),
            unique_suffix()
        ));
        fs::create_dir(&temp_dir).map_err(|e| write_error(&temp_dir, e))?;
        Ok(Self {
            store,
            seq,
            temp_dir,
            files: Vec::new(),
            committed: false,
            #[cfg(test)]
            fault: None,
        })
    }

    /// The sequence number this checkpoint will have.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The files finished so far.
    pub fn files(&self) -> &[FileEntry] {
        &self.files
    }

    /// Writes a whole file from memory.
    pub fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<FileEntry, CheckpointError> {
        let mut file = self.file(name)?;
        match file.write_all(bytes) {
            Ok(()) => file.finish(),
            Err(e) => Err(file.fail(e)),
        }
    }

    /// Writes a file from a reader, streaming (for large executor or shard state).
    /// A failure of `source` is [`CheckpointError::Source`].
    pub fn write_file_from(
        &mut self,
        name: &str,
        mut source: impl Read,
    ) -> Result<FileEntry, CheckpointError> {
        let mut file = self.file(name)?;
        let mut buf = vec![0u8; BUFFER_BYTES];
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if n <= buf.len() => n,
                Ok(_) => {
                    return Err(CheckpointError::Source {
                        name: name.to_owned(),
                        source: Arc::new(io::Error::other("reader reported more bytes than asked")),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(CheckpointError::Source {
                        name: name.to_owned(),
                        source: Arc::new(e),
                    })
                }
            };
            if let Err(e) = file.write_all(&buf[..n]) {
                return Err(file.fail(e));
            }
        }
        file.finish()
    }

    /// Opens a file for streaming writes through [`io::Write`]; call
    /// [`FileWriter::finish`] to keep it. Names must pass
    /// [`validate_file_name`] and be new in this checkpoint.
    pub fn file(&mut self, name: &str) -> Result<FileWriter<'_>, CheckpointError> {
        validate_file_name(name)?;
        if self.files.iter().any(|f| f.name == name) {
            return Err(CheckpointError::BadFileName {
                name: name.to_owned(),
                reason: "was already written in this checkpoint",
            });
        }
        let temp_path = self.temp_dir.join(format!("{TEMP_PREFIX}{name}"));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp_path)
            .map_err(|e| write_error(&temp_path, e))?;
        Ok(FileWriter {
            final_path: self.temp_dir.join(name),
            name: name.to_owned(),
            temp_path,
            out: Some(BufWriter::with_capacity(BUFFER_BYTES, file)),
            hasher: crc32fast::Hasher::new(),
            size: 0,
            error: None,
            done: false,
            writer: self,
        })
    }

    /// Commits the checkpoint: writes the manifest (with `metadata`, the app's own record)
    /// atomically, moves the checkpoint into place as `ckpt-<seq>` (replacing an older one
    /// with the same seq), fsyncs the directory, then prunes: checkpoints with a higher seq
    /// (an abandoned run) are removed, and of the others only the newest `keep` complete ones
    /// remain, this one always among them. A pruning failure is logged, not returned.
    pub fn commit(
        mut self,
        metadata: serde_json::Value,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let identity = self.store.identity().clone();
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            job_id: identity.job_id,
            app: identity.app,
            seq: self.seq,
            created_unix_ms: now_unix_ms(),
            metadata,
            files: self.files.clone(),
        };
        let manifest_path = self.temp_dir.join(MANIFEST_FILE);
        let bytes = manifest::encode(&manifest).map_err(|e| CheckpointError::BadManifest {
            path: manifest_path.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        atomic_write(&self.temp_dir, MANIFEST_FILE, &bytes)?;

        let dir = self.store.dir().to_path_buf();
        let final_dir = dir.join(checkpoint_dir_name(self.seq));
        let replaced = move_aside_if_present(&dir, &final_dir)?;
        fs::rename(&self.temp_dir, &final_dir).map_err(|e| write_error(&final_dir, e))?;
        self.committed = true;
        if let Some(old) = replaced {
            remove_best_effort(&old);
        }
        sync_dir(&dir)?;
        tracing::debug!(seq = self.seq, path = %final_dir.display(), "checkpoint committed");

        if let Err(e) = self.store.prune_after_commit(self.seq) {
            tracing::warn!(seq = self.seq, error = %e, "could not prune old checkpoints");
        }
        Ok(CheckpointInfo::from_manifest(manifest, final_dir))
    }

    /// Makes every later file write fail with `kind` (tests of the error mapping).
    #[cfg(test)]
    pub(crate) fn inject_write_fault(&mut self, kind: io::ErrorKind) {
        self.fault = Some(kind);
    }
}

impl Drop for CheckpointWriter {
    fn drop(&mut self) {
        if !self.committed {
            remove_best_effort(&self.temp_dir);
        }
    }
}

/// Renames an existing `final_dir` to a temporary name, so the new one can take its place.
fn move_aside_if_present(dir: &Path, final_dir: &Path) -> Result<Option<PathBuf>, CheckpointError> {
    if fs::symlink_metadata(final_dir).is_err() {
        return Ok(None);
    }
    let aside = dir.join(format!("{TEMP_PREFIX}old-{}", unique_suffix()));
    fs::rename(final_dir, &aside).map_err(|e| write_error(final_dir, e))?;
    Ok(Some(aside))
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One checkpoint file being streamed. Write with [`io::Write`], then [`finish`] to fsync it
/// and add it to the checkpoint. The first write error sticks: later writes repeat it and
/// `finish` returns it as a [`CheckpointError`] (`DiskFull` for a full disk). Dropping it
/// without `finish` removes the partial file.
///
/// [`finish`]: FileWriter::finish
#[derive(Debug)]
pub struct FileWriter<'w> {
    writer: &'w mut CheckpointWriter,
    name: String,
    temp_path: PathBuf,
    final_path: PathBuf,
    out: Option<BufWriter<File>>,
    hasher: crc32fast::Hasher,
    size: u64,
    error: Option<io::Error>,
    done: bool,
}

impl FileWriter<'_> {
    /// The file's name in the checkpoint.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes accepted so far.
    pub fn bytes_written(&self) -> u64 {
        self.size
    }

    /// Flushes, fsyncs and renames the file into place; returns its entry.
    pub fn finish(mut self) -> Result<FileEntry, CheckpointError> {
        if let Some(e) = self.error.take() {
            return Err(write_error(&self.temp_path, e));
        }
        let Some(out) = self.out.take() else {
            return Err(write_error(
                &self.temp_path,
                io::Error::other("file already closed"),
            ));
        };
        let file = out
            .into_inner()
            .map_err(|e| write_error(&self.temp_path, e.into_error()))?;
        file.sync_all()
            .map_err(|e| write_error(&self.temp_path, e))?;
        drop(file);
        fs::rename(&self.temp_path, &self.final_path)
            .map_err(|e| write_error(&self.final_path, e))?;
        self.done = true;
        let entry = FileEntry {
            name: self.name.clone(),
            size: self.size,
            crc32: self.hasher.clone().finalize(),
        };
        self.writer.files.push(entry.clone());
        Ok(entry)
    }

    /// The error to return after a failed `write`: the recorded one if any, else `err`.
    fn fail(mut self, err: io::Error) -> CheckpointError {
        let err = self.error.take().unwrap_or(err);
        write_error(&self.temp_path, err)
    }

    fn record(&mut self, err: io::Error) -> io::Error {
        let copy = io::Error::new(err.kind(), err.to_string());
        if err.kind() != io::ErrorKind::Interrupted && self.error.is_none() {
            self.error = Some(err);
        }
        copy
    }
}

impl Write for FileWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(e) = &self.error {
            return Err(io::Error::new(e.kind(), e.to_string()));
        }
        #[cfg(test)]
        if let Some(kind) = self.writer.fault {
            return Err(self.record(io::Error::new(kind, "injected write fault")));
        }
        let Some(out) = self.out.as_mut() else {
            return Err(io::Error::other("file already closed"));
        };
        match out.write(buf) {
            Ok(n) => {
                self.hasher.update(&buf[..n]);
                self.size += n as u64;
                Ok(n)
            }
            Err(e) => Err(self.record(e)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(e) = &self.error {
            return Err(io::Error::new(e.kind(), e.to_string()));
        }
        match self.out.as_mut().map(BufWriter::flush) {
            Some(Err(e)) => Err(self.record(e)),
            _ => Ok(()),
        }
    }
}

impl Drop for FileWriter<'_> {
    fn drop(&mut self) {
        if !self.done {
            drop(self.out.take());
            remove_best_effort(&self.temp_path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::JobIdentity;

    fn store(dir: &Path) -> CheckpointStore {
        CheckpointStore::create(dir, JobIdentity::new("job", "app"), 2).unwrap()
    }

    /// A full disk met through the streaming API is `DiskFull`, naming the file, and the
    /// abandoned checkpoint leaves nothing visible.
    #[test]
    fn disk_full_while_streaming_maps_to_disk_full() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let mut writer = store.begin(1).unwrap();
        writer.inject_write_fault(io::ErrorKind::StorageFull);
        let err = writer
            .write_file_from("big.bin", &vec![7u8; 3 << 20][..])
            .unwrap_err();
        assert!(matches!(err, CheckpointError::DiskFull { .. }), "{err}");
        assert!(err.to_string().contains("big.bin"), "{err}");

        let mut file = writer.file("other.bin").unwrap();
        assert_eq!(
            file.write(b"x").unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        // The error sticks and `finish` reports it.
        let err = file.finish().unwrap_err();
        assert!(matches!(err, CheckpointError::DiskFull { .. }), "{err}");

        drop(writer);
        assert!(store.list().unwrap().is_empty());
        assert_eq!(
            fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "temp dir left behind"
        );
    }

    #[test]
    fn quota_exceeded_is_disk_full_too() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let mut writer = store.begin(1).unwrap();
        writer.inject_write_fault(io::ErrorKind::QuotaExceeded);
        let err = writer.write_file("a", b"abc").unwrap_err();
        assert!(matches!(err, CheckpointError::DiskFull { .. }), "{err}");
    }

    #[test]
    fn dropped_file_writer_leaves_no_file() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let mut writer = store.begin(1).unwrap();
        {
            let mut file = writer.file("half").unwrap();
            file.write_all(b"partial").unwrap();
        }
        assert!(writer.files().is_empty());
        let info = writer.commit(serde_json::Value::Null).unwrap();
        assert!(info.files.is_empty());
        let names: Vec<_> = fs::read_dir(&info.path)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [MANIFEST_FILE]);
    }
}
