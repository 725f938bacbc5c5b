//! Reading a checkpoint back: reading and checking its manifest, verifying every file's
//! size and checksum (`verify`), and [`LoadedCheckpoint`] — a verified checkpoint whose
//! files are handed out only after a second check ([`LoadedCheckpoint::read`], or streamed
//! through [`FileReader`], which checks at end of file).

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{io_error, CheckpointError};
use crate::layout::MANIFEST_FILE;
use crate::manifest::{
    self, CheckpointInfo, FileEntry, Manifest, ManifestError, MANIFEST_BYTES_MAX,
};

/// Reads and checks the manifest of the checkpoint directory `path` named for `seq`.
pub(crate) fn read_manifest(path: &Path, seq: u64) -> Result<Manifest, CheckpointError> {
    let manifest_path = path.join(MANIFEST_FILE);
    let file = match File::open(&manifest_path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CheckpointError::Incomplete {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io_error("open", &manifest_path, e)),
    };
    let mut bytes = Vec::new();
    file.take(MANIFEST_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error("read", &manifest_path, e))?;
    if bytes.len() as u64 > MANIFEST_BYTES_MAX {
        return Err(CheckpointError::BadManifest {
            path: manifest_path,
            reason: format!("larger than {MANIFEST_BYTES_MAX} bytes"),
        });
    }
    let manifest = manifest::decode(&bytes).map_err(|e| match e {
        ManifestError::Corrupt { expected, actual } => CheckpointError::Corrupt {
            path: manifest_path.clone(),
            expected,
            actual,
        },
        ManifestError::Bad(reason) => CheckpointError::BadManifest {
            path: manifest_path.clone(),
            reason,
        },
    })?;
    if manifest.seq != seq {
        return Err(CheckpointError::BadManifest {
            path: manifest_path,
            reason: format!("it says seq {}, its directory says {seq}", manifest.seq),
        });
    }
    Ok(manifest)
}

/// Checks every file of `info` against its recorded size and checksum.
pub(crate) fn verify(info: &CheckpointInfo) -> Result<(), CheckpointError> {
    let mut buf = vec![0u8; VERIFY_BUFFER_BYTES];
    for entry in &info.files {
        let path = info.path.join(&entry.name);
        let file = open_entry(&path, entry)?;
        let mut reader = FileReader::new(file, path, entry.clone());
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(reader.checkpoint_error(e)),
            }
        }
    }
    Ok(())
}

const VERIFY_BUFFER_BYTES: usize = 1 << 20;

/// Opens `path` and checks its length against `entry`.
fn open_entry(path: &Path, entry: &FileEntry) -> Result<File, CheckpointError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CheckpointError::MissingFile {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io_error("open", path, e)),
    };
    let len = file
        .metadata()
        .map_err(|e| io_error("stat", path, e))?
        .len();
    if len != entry.size {
        return Err(CheckpointError::Truncated {
            path: path.to_path_buf(),
            expected_bytes: entry.size,
            actual_bytes: len,
        });
    }
    Ok(file)
}

/// A checkpoint whose manifest and every file were verified when it was loaded.
#[derive(Debug, Clone)]
pub struct LoadedCheckpoint {
    info: CheckpointInfo,
}

impl LoadedCheckpoint {
    pub(crate) fn new(info: CheckpointInfo) -> Self {
        Self { info }
    }

    /// Its sequence number.
    pub fn seq(&self) -> u64 {
        self.info.seq
    }

    /// The app's metadata, as given to `commit`.
    pub fn metadata(&self) -> &serde_json::Value {
        &self.info.metadata
    }

    /// Its manifest: identity, creation time, files.
    pub fn info(&self) -> &CheckpointInfo {
        &self.info
    }

    /// The names of its files, in the order they were written.
    pub fn file_names(&self) -> impl Iterator<Item = &str> {
        self.info.files.iter().map(|f| f.name.as_str())
    }

    /// The content of file `name`, checked again against its size and checksum.
    pub fn read(&self, name: &str) -> Result<Vec<u8>, CheckpointError> {
        self.info.read_file(name)
    }

    /// A streaming reader of file `name`; it fails with `io::ErrorKind::InvalidData`
    /// (wrapping the [`CheckpointError`]) if the content no longer matches at end of file.
    pub fn open(&self, name: &str) -> Result<FileReader, CheckpointError> {
        self.info.open_file(name)
    }
}

impl CheckpointInfo {
    /// The content of this checkpoint's file `name`, checked against the size and checksum
    /// its manifest gives. Only that file is read: where one file of a listed checkpoint
    /// ([`CheckpointStore::list`](crate::CheckpointStore::list)) is wanted, this verifies
    /// it without reading the others as [`LoadedCheckpoint`] does.
    pub fn read_file(&self, name: &str) -> Result<Vec<u8>, CheckpointError> {
        let mut reader = self.open_file(name)?;
        let mut bytes = Vec::with_capacity(usize::try_from(reader.entry.size).unwrap_or(0));
        match reader.read_to_end(&mut bytes) {
            Ok(_) => Ok(bytes),
            Err(e) => Err(reader.checkpoint_error(e)),
        }
    }

    /// A streaming reader of file `name` (see [`LoadedCheckpoint::open`]).
    pub fn open_file(&self, name: &str) -> Result<FileReader, CheckpointError> {
        let entry = self
            .file(name)
            .ok_or_else(|| CheckpointError::NotInCheckpoint {
                seq: self.seq,
                name: name.to_owned(),
            })?;
        let path = self.path.join(name);
        let file = open_entry(&path, entry)?;
        Ok(FileReader::new(file, path, entry.clone()))
    }
}

/// Streams one checkpoint file, checking size and checksum as it goes.
#[derive(Debug)]
pub struct FileReader {
    file: File,
    path: PathBuf,
    entry: FileEntry,
    hasher: crc32fast::Hasher,
    read: u64,
}

impl FileReader {
    fn new(file: File, path: PathBuf, entry: FileEntry) -> Self {
        Self {
            file,
            path,
            entry,
            hasher: crc32fast::Hasher::new(),
            read: 0,
        }
    }

    /// The file's recorded entry.
    pub fn entry(&self) -> &FileEntry {
        &self.entry
    }

    /// Turns an error from `read` back into the [`CheckpointError`] behind it.
    pub fn checkpoint_error(&self, err: io::Error) -> CheckpointError {
        if err
            .get_ref()
            .is_some_and(|inner| inner.is::<CheckpointError>())
        {
            if let Some(inner) = err.into_inner() {
                if let Ok(ckpt) = inner.downcast::<CheckpointError>() {
                    return *ckpt;
                }
            }
            return io_error("read", &self.path, io::Error::other("unreadable error"));
        }
        io_error("read", &self.path, err)
    }

    fn check(&self, err: CheckpointError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, err)
    }

    fn truncated(&self) -> io::Error {
        self.check(CheckpointError::Truncated {
            path: self.path.clone(),
            expected_bytes: self.entry.size,
            actual_bytes: self.read,
        })
    }
}

impl Read for FileReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        if n == 0 && !buf.is_empty() {
            if self.read != self.entry.size {
                return Err(self.truncated());
            }
            let actual = self.hasher.clone().finalize();
            if actual != self.entry.crc32 {
                return Err(self.check(CheckpointError::Corrupt {
                    path: self.path.clone(),
                    expected: self.entry.crc32,
                    actual,
                }));
            }
            return Ok(0);
        }
        self.read += n as u64;
        if self.read > self.entry.size {
            return Err(self.truncated());
        }
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Whether `path` holds a manifest file at all (complete or not).
pub(crate) fn has_manifest(path: &Path) -> bool {
    fs::symlink_metadata(path.join(MANIFEST_FILE)).is_ok()
}
