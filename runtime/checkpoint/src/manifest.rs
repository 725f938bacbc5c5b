//! The manifest (`MANIFEST.json`): what a committed checkpoint contains, and the envelope
//! that protects it with a checksum. [`CheckpointInfo`] is a manifest that was read back,
//! with the directory it describes.
//!
//! The file is JSON: `{"checksum_crc32": N, "manifest": {...}}`, where `N` is the CRC-32 of
//! the exact bytes of the `manifest` value as stored (kept verbatim with `RawValue`, so the
//! check never depends on re-serialising).

use std::collections::HashSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::identity::JobIdentity;
use crate::layout::validate_file_name;

/// The manifest format this crate writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;

/// The largest manifest this crate reads, in bytes (its metadata included).
pub const MANIFEST_BYTES_MAX: u64 = 64 << 20;

/// One file of a checkpoint: its name, size and CRC-32 (IEEE) checksum.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
    pub crc32: u32,
}

/// The manifest's body, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub format: u32,
    pub job_id: String,
    pub app: String,
    pub seq: u64,
    pub created_unix_ms: u64,
    pub metadata: serde_json::Value,
    pub files: Vec<FileEntry>,
}

/// A checkpoint described by a manifest that parsed and passed its own checksum.
///
/// [`CheckpointStore::list`](crate::CheckpointStore::list) returns these without reading the
/// data files; a [`LoadedCheckpoint`](crate::LoadedCheckpoint) holds one whose every file was
/// verified.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointInfo {
    /// The checkpoint's sequence number.
    pub seq: u64,
    /// Its directory.
    pub path: PathBuf,
    /// The job and app that wrote it.
    pub identity: JobIdentity,
    /// When it was committed, in milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The app's metadata, as given to `commit`.
    pub metadata: serde_json::Value,
    /// Its files, in the order they were written.
    pub files: Vec<FileEntry>,
}

impl CheckpointInfo {
    pub(crate) fn from_manifest(manifest: Manifest, path: PathBuf) -> Self {
        Self {
            seq: manifest.seq,
            path,
            identity: JobIdentity::new(manifest.job_id, manifest.app),
            created_unix_ms: manifest.created_unix_ms,
            metadata: manifest.metadata,
            files: manifest.files,
        }
    }

    /// The entry of the file called `name`, if the checkpoint has one.
    pub fn file(&self, name: &str) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.name == name)
    }

    /// The total size of its files, in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Why a manifest was refused.
#[derive(Debug, PartialEq)]
pub(crate) enum ManifestError {
    /// The body does not match the envelope's checksum.
    Corrupt { expected: u32, actual: u32 },
    /// Unparseable, or says something impossible.
    Bad(String),
}

#[derive(Deserialize)]
struct Envelope<'a> {
    checksum_crc32: u32,
    #[serde(borrow)]
    manifest: &'a RawValue,
}

/// The manifest file's bytes.
pub(crate) fn encode(manifest: &Manifest) -> Result<Vec<u8>, serde_json::Error> {
    let body = serde_json::to_string_pretty(manifest)?;
    let crc = crc32fast::hash(body.as_bytes());
    Ok(format!("{{\n\"checksum_crc32\": {crc},\n\"manifest\": {body}\n}}\n").into_bytes())
}

/// Parses and checks a manifest file's bytes.
pub(crate) fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    let envelope: Envelope<'_> = serde_json::from_slice(bytes)
        .map_err(|e| ManifestError::Bad(format!("not a manifest: {e}")))?;
    let body = envelope.manifest.get();
    let actual = crc32fast::hash(body.as_bytes());
    if actual != envelope.checksum_crc32 {
        return Err(ManifestError::Corrupt {
            expected: envelope.checksum_crc32,
            actual,
        });
    }
    let manifest: Manifest = serde_json::from_str(body)
        .map_err(|e| ManifestError::Bad(format!("unexpected content: {e}")))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(ManifestError::Bad(format!(
            "format {} (this build reads format {MANIFEST_FORMAT})",
            manifest.format
        )));
    }
    let mut names = HashSet::new();
    for file in &manifest.files {
        validate_file_name(&file.name).map_err(|e| ManifestError::Bad(e.to_string()))?;
        if !names.insert(file.name.as_str()) {
            return Err(ManifestError::Bad(format!(
                "file {:?} listed twice",
                file.name
            )));
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            job_id: "job-1".into(),
            app: "counter".into(),
            seq: 42,
            created_unix_ms: 1_700_000_000_000,
            metadata: serde_json::json!({"version": 17, "loss": 0.125, "z": [1, 2], "a": null}),
            files: vec![FileEntry {
                name: "state.bin".into(),
                size: 3,
                crc32: crc32fast::hash(b"abc"),
            }],
        }
    }

    #[test]
    fn round_trip() {
        let bytes = encode(&sample()).unwrap();
        assert_eq!(decode(&bytes).unwrap(), sample());
    }

    #[test]
    fn any_flipped_body_byte_is_detected() {
        let bytes = encode(&sample()).unwrap();
        let start = bytes
            .windows(10)
            .position(|w| w == b"\"manifest\"")
            .unwrap()
            + 12;
        for i in start..bytes.len() - 3 {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(decode(&bad).is_err(), "flip at {i} not detected");
        }
    }

    #[test]
    fn garbage_and_truncation_are_bad() {
        let bytes = encode(&sample()).unwrap();
        for bad in [&b""[..], b"{}", b"\xff\xfe", &bytes[..bytes.len() / 2]] {
            assert!(matches!(decode(bad), Err(ManifestError::Bad(_))));
        }
    }

    #[test]
    fn unsafe_file_names_are_refused() {
        let mut m = sample();
        m.files[0].name = "../../etc/passwd".into();
        let bytes = encode(&m).unwrap();
        assert!(matches!(decode(&bytes), Err(ManifestError::Bad(_))));
        let mut m = sample();
        m.files.push(m.files[0].clone());
        assert!(matches!(
            decode(&encode(&m).unwrap()),
            Err(ManifestError::Bad(_))
        ));
    }
}
