//! [`CheckpointStore`]: one job's checkpoint directory — opening it for a new job
//! ([`create`](CheckpointStore::create)) or for a resume
//! ([`open_for_resume`](CheckpointStore::open_for_resume)), the ownership checks, listing,
//! finding the newest verified checkpoint, and cleaning up (temporary entries, incomplete
//! checkpoints, pruning to `keep` after a commit).

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{write_error, CheckpointError, SkippedCheckpoint};
use crate::fsio::{dir_error, non_directory_ancestor, remove_best_effort, sync_dir};
use crate::identity::JobIdentity;
use crate::layout::{classify, unique_suffix, EntryKind, TEMP_PREFIX};
use crate::manifest::CheckpointInfo;
use crate::reader::{has_manifest, read_manifest, verify, LoadedCheckpoint};
use crate::writer::CheckpointWriter;

/// A checkpoint directory of one job. Cheap to clone; clones share the record of skipped
/// checkpoints. One store (one process) should write to a directory at a time.
#[derive(Clone, Debug)]
pub struct CheckpointStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    identity: JobIdentity,
    keep: usize,
    skipped: Mutex<Vec<SkippedCheckpoint>>,
}

/// The checkpoint-related entries of the directory.
struct Scan {
    /// `(seq, path)` of every `ckpt-<seq>` directory, ascending by seq.
    checkpoints: Vec<(u64, PathBuf)>,
    /// Every `.tmp-*` entry.
    temps: Vec<PathBuf>,
}

impl CheckpointStore {
    /// Opens `dir` for writing checkpoints of `identity` (`--checkpoint-dir`), keeping the
    /// newest `keep` (at least 1).
    ///
    /// Creates `dir` if missing and checks it is writable (writes and removes a probe file).
    /// Refuses a directory holding checkpoints of another app ([`CheckpointError::AnotherApp`])
    /// or another job ([`CheckpointError::AnotherJob`]). Then removes leftovers of
    /// interrupted writes (temporary entries, checkpoints without a manifest).
    pub fn create(
        dir: impl AsRef<Path>,
        identity: JobIdentity,
        keep: usize,
    ) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref();
        check_keep(keep)?;
        match fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => return Err(not_a_directory(dir, dir)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(|e| match non_directory_ancestor(dir) {
                    Some(path) => not_a_directory(dir, &path),
                    None => write_error(dir, e),
                })?;
            }
            Err(e) => return Err(dir_error(dir, e)),
        }
        let store = Self::new(dir, identity, keep);
        let scan = store.scan()?;
        store.check_owner(&scan)?;
        probe_writable(dir)?;
        store.clean_up(&scan);
        Ok(store)
    }

    /// Opens an existing `dir` to resume a job of app `app` (`--resume`).
    ///
    /// The directory must exist ([`CheckpointError::MissingDirectory`]) and hold at least
    /// one checkpoint with a valid manifest ([`CheckpointError::NoCompleteCheckpoint`]);
    /// every one must belong to `app` ([`CheckpointError::AnotherApp`]) and to one job. The
    /// new process may have a new job id: the store adopts the stored one
    /// ([`identity`](Self::identity)), so checkpoints written through it continue the same
    /// directory. Use [`load_latest`](Self::load_latest) to get the state to resume from.
    pub fn open_for_resume(
        dir: impl AsRef<Path>,
        app: &str,
        keep: usize,
    ) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref();
        check_keep(keep)?;
        match fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => return Err(not_a_directory(dir, dir)),
            Ok(_) => {}
            Err(e) => return Err(dir_error(dir, e)),
        }
        let scan = scan(dir)?;
        let mut owner: Option<JobIdentity> = None;
        let mut skipped = Vec::new();
        for (seq, path) in scan.checkpoints.iter().rev() {
            let manifest = match read_manifest(path, *seq) {
                Ok(manifest) => manifest,
                Err(reason) => {
                    skipped.push(skip(*seq, path, reason));
                    continue;
                }
            };
            if manifest.app != app {
                return Err(CheckpointError::AnotherApp {
                    dir: dir.to_path_buf(),
                    found_app: manifest.app,
                    found_job: manifest.job_id,
                    expected_app: app.to_owned(),
                });
            }
            let found = JobIdentity::new(manifest.job_id, manifest.app);
            match &owner {
                None => owner = Some(found),
                Some(newest) if *newest != found => {
                    return Err(CheckpointError::AnotherJob {
                        dir: dir.to_path_buf(),
                        found,
                        expected: newest.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        let Some(identity) = owner else {
            return Err(CheckpointError::NoCompleteCheckpoint {
                dir: dir.to_path_buf(),
                skipped,
            });
        };
        let store = Self::new(dir, identity, keep);
        store.clean_up(&scan);
        Ok(store)
    }

    fn new(dir: &Path, identity: JobIdentity, keep: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                identity,
                keep,
                skipped: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The job and app whose checkpoints this store reads and writes (after a resume: the
    /// stored job id).
    pub fn identity(&self) -> &JobIdentity {
        &self.inner.identity
    }

    /// How many complete checkpoints a commit keeps.
    pub fn keep(&self) -> usize {
        self.inner.keep
    }

    /// Starts writing checkpoint `seq`. Seqs should increase: committing `seq` discards any
    /// checkpoint with a higher one (see [`CheckpointWriter::commit`]).
    pub fn begin(&self, seq: u64) -> Result<CheckpointWriter, CheckpointError> {
        CheckpointWriter::new(self.clone(), seq)
    }

    /// The checkpoints with a valid manifest of this store's job, ascending by seq. Their
    /// data files are not read; [`latest_complete`](Self::latest_complete) verifies them.
    pub fn list(&self) -> Result<Vec<CheckpointInfo>, CheckpointError> {
        let scan = self.scan()?;
        Ok(scan
            .checkpoints
            .iter()
            .filter_map(|(seq, path)| self.read_info(*seq, path).ok())
            .collect())
    }

    /// The newest checkpoint whose manifest and every file verify, or `None` if there is
    /// none. Each newer checkpoint that fails is skipped with a warning and its reason is
    /// recorded ([`skipped`](Self::skipped)).
    pub fn latest_complete(&self) -> Result<Option<LoadedCheckpoint>, CheckpointError> {
        let scan = self.scan()?;
        let mut skipped = Vec::new();
        let mut found = None;
        for (seq, path) in scan.checkpoints.iter().rev() {
            match self
                .read_info(*seq, path)
                .and_then(|info| verify(&info).map(|()| info))
            {
                Ok(info) => {
                    found = Some(LoadedCheckpoint::new(info));
                    break;
                }
                Err(reason) => {
                    tracing::warn!(
                        seq,
                        path = %path.display(),
                        reason = %reason,
                        "skipping checkpoint that failed verification"
                    );
                    skipped.push(skip(*seq, path, reason));
                }
            }
        }
        *self.lock_skipped() = skipped;
        Ok(found)
    }

    /// Like [`latest_complete`](Self::latest_complete), but having none is
    /// [`CheckpointError::NoCompleteCheckpoint`], listing why each one was skipped.
    pub fn load_latest(&self) -> Result<LoadedCheckpoint, CheckpointError> {
        match self.latest_complete()? {
            Some(loaded) => Ok(loaded),
            None => Err(CheckpointError::NoCompleteCheckpoint {
                dir: self.dir().to_path_buf(),
                skipped: self.skipped(),
            }),
        }
    }

    /// The checkpoints the last [`latest_complete`](Self::latest_complete) passed over,
    /// newest first, with the reasons.
    pub fn skipped(&self) -> Vec<SkippedCheckpoint> {
        self.lock_skipped().clone()
    }

    fn lock_skipped(&self) -> std::sync::MutexGuard<'_, Vec<SkippedCheckpoint>> {
        self.inner
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn scan(&self) -> Result<Scan, CheckpointError> {
        scan(self.dir())
    }

    /// The manifest of checkpoint `seq` at `path`, checked to belong to this store's job.
    fn read_info(&self, seq: u64, path: &Path) -> Result<CheckpointInfo, CheckpointError> {
        let manifest = read_manifest(path, seq)?;
        let identity = self.identity();
        if manifest.app != identity.app {
            return Err(CheckpointError::AnotherApp {
                dir: self.dir().to_path_buf(),
                found_app: manifest.app,
                found_job: manifest.job_id,
                expected_app: identity.app.clone(),
            });
        }
        if manifest.job_id != identity.job_id {
            return Err(CheckpointError::AnotherJob {
                dir: self.dir().to_path_buf(),
                found: JobIdentity::new(manifest.job_id, manifest.app),
                expected: identity.clone(),
            });
        }
        Ok(CheckpointInfo::from_manifest(manifest, path.to_path_buf()))
    }

    /// Refuses the directory if a valid manifest names another app or job.
    fn check_owner(&self, scan: &Scan) -> Result<(), CheckpointError> {
        for (seq, path) in &scan.checkpoints {
            let refused = self.read_info(*seq, path);
            if let Err(
                e @ (CheckpointError::AnotherApp { .. } | CheckpointError::AnotherJob { .. }),
            ) = refused
            {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Removes leftovers of interrupted writes (best effort).
    fn clean_up(&self, scan: &Scan) {
        for temp in &scan.temps {
            remove_best_effort(temp);
        }
        for (_, path) in &scan.checkpoints {
            if !has_manifest(path) {
                tracing::info!(path = %path.display(), "removing incomplete checkpoint");
                remove_best_effort(path);
            }
        }
    }

    /// After committing `seq`: removes checkpoints with a higher seq, and all but the newest
    /// `keep` complete ones (counting `seq` itself, which always stays).
    pub(crate) fn prune_after_commit(&self, seq: u64) -> Result<(), CheckpointError> {
        let scan = self.scan()?;
        let mut kept = 1;
        let mut removed = false;
        for (other, path) in scan.checkpoints.iter().rev() {
            if *other == seq {
                continue;
            }
            if *other > seq {
                tracing::warn!(
                    seq = other,
                    committed = seq,
                    "removing checkpoint newer than the one just committed (an abandoned run)"
                );
            } else if kept < self.keep() && self.read_info(*other, path).is_ok() {
                kept += 1;
                continue;
            }
            self.remove_checkpoint(path)?;
            removed = true;
        }
        if removed {
            sync_dir(self.dir())?;
        }
        Ok(())
    }

    /// Renames a checkpoint out of sight, then deletes it.
    fn remove_checkpoint(&self, path: &Path) -> Result<(), CheckpointError> {
        let aside = self
            .dir()
            .join(format!("{TEMP_PREFIX}removed-{}", unique_suffix()));
        fs::rename(path, &aside).map_err(|e| write_error(path, e))?;
        remove_best_effort(&aside);
        Ok(())
    }
}

fn scan(dir: &Path) -> Result<Scan, CheckpointError> {
    let mut scan = Scan {
        checkpoints: Vec::new(),
        temps: Vec::new(),
    };
    for entry in fs::read_dir(dir).map_err(|e| dir_error(dir, e))? {
        let entry = entry.map_err(|e| dir_error(dir, e))?;
        let path = entry.path();
        match classify(&entry.file_name()) {
            EntryKind::Checkpoint(seq) if path.is_dir() => scan.checkpoints.push((seq, path)),
            EntryKind::Temp => scan.temps.push(path),
            EntryKind::Checkpoint(_) | EntryKind::Other => {}
        }
    }
    scan.checkpoints.sort_unstable_by_key(|(seq, _)| *seq);
    Ok(scan)
}

fn skip(seq: u64, path: &Path, reason: CheckpointError) -> SkippedCheckpoint {
    SkippedCheckpoint {
        seq,
        path: path.to_path_buf(),
        reason,
    }
}

fn check_keep(keep: usize) -> Result<(), CheckpointError> {
    if keep == 0 {
        return Err(CheckpointError::KeepZero);
    }
    Ok(())
}

fn not_a_directory(dir: &Path, path: &Path) -> CheckpointError {
    CheckpointError::NotADirectory {
        dir: dir.to_path_buf(),
        path: path.to_path_buf(),
    }
}

/// Writes and removes a probe file in `dir`.
fn probe_writable(dir: &Path) -> Result<(), CheckpointError> {
    let probe = dir.join(format!("{TEMP_PREFIX}probe-{}", unique_suffix()));
    let result = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut file| file.write_all(b"harp checkpoint probe\n"));
    let removed = fs::remove_file(&probe);
    match (result, removed) {
        (Err(e), _) => Err(write_error(dir, e)),
        (Ok(()), Err(e)) => Err(write_error(dir, e)),
        (Ok(()), Ok(())) => Ok(()),
    }
}
