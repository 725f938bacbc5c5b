//! The on-disk names: checkpoint directory names (`ckpt-<seq>`), the manifest's name,
//! temporary names (all starting with `.tmp-`, which readers ignore), and the rule for the
//! file names a writer accepts.

use std::ffi::OsStr;
use std::process;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::CheckpointError;

/// The manifest's file name inside a checkpoint directory.
pub const MANIFEST_FILE: &str = "MANIFEST.json";

/// The longest file name a writer accepts, in bytes.
pub const MAX_FILE_NAME_BYTES: usize = 255;

const CHECKPOINT_PREFIX: &str = "ckpt-";
const SEQ_DIGITS: usize = 20;
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

/// `ckpt-<seq>`, zero-padded to 20 digits so names sort like seqs.
pub(crate) fn checkpoint_dir_name(seq: u64) -> String {
    format!("{CHECKPOINT_PREFIX}{seq:0width$}", width = SEQ_DIGITS)
}

/// What a directory entry of a checkpoint directory is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// `ckpt-<20 digits>`: a checkpoint (complete or not).
    Checkpoint(u64),
    /// `.tmp-*`: a write in progress or abandoned.
    Temp,
    /// Anything else: not ours, left alone.
    Other,
}

pub(crate) fn classify(name: &OsStr) -> EntryKind {
    let Some(name) = name.to_str() else {
        return EntryKind::Other;
    };
    if name.starts_with(TEMP_PREFIX) {
        return EntryKind::Temp;
    }
    match name.strip_prefix(CHECKPOINT_PREFIX) {
        Some(digits)
            if digits.len() == SEQ_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            digits
                .parse()
                .map_or(EntryKind::Other, EntryKind::Checkpoint)
        }
        _ => EntryKind::Other,
    }
}

/// A name unique within this process and distinct from other processes': `<pid>-<n>`.
pub(crate) fn unique_suffix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Accepts only simple names: 1..=255 bytes, no `/`, `\` or NUL, not starting with `.`
/// (which excludes `.`, `..` and the temporary names), and not the manifest's name.
pub fn validate_file_name(name: &str) -> Result<(), CheckpointError> {
    let reason = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_FILE_NAME_BYTES {
        "is longer than 255 bytes"
    } else if name.contains(['/', '\\']) {
        "contains a path separator"
    } else if name.contains('\0') {
        "contains a NUL byte"
    } else if name.starts_with('.') {
        "starts with '.' (reserved for '.', '..' and temporary files)"
    } else if name == MANIFEST_FILE {
        "is reserved for the manifest"
    } else {
        return Ok(());
    };
    Err(CheckpointError::BadFileName {
        name: name.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_round_trip_and_sort() {
        for seq in [0, 7, 1_000, u64::MAX] {
            let name = checkpoint_dir_name(seq);
            assert_eq!(classify(OsStr::new(&name)), EntryKind::Checkpoint(seq));
        }
        assert!(checkpoint_dir_name(9) < checkpoint_dir_name(10));
    }

    #[test]
    fn other_entries_are_not_checkpoints() {
        for name in [
            "ckpt-1",
            "ckpt-",
            "ckpt-0000000000000000000x",
            "notes.txt",
            "CKPT-00000000000000000001",
        ] {
            assert_eq!(classify(OsStr::new(name)), EntryKind::Other, "{name}");
        }
        assert_eq!(classify(OsStr::new(".tmp-ckpt-1-2")), EntryKind::Temp);
        // 20 digits that overflow u64.
        assert_eq!(
            classify(OsStr::new("ckpt-99999999999999999999")),
            EntryKind::Other
        );
    }

    #[test]
    fn file_names() {
        for ok in ["state.bin", "a..b", "executor-17", "ü"] {
            validate_file_name(ok).unwrap();
        }
        let long = "x".repeat(256);
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "a\0b",
            ".hidden",
            ".tmp-x",
            MANIFEST_FILE,
            &long,
        ] {
            let err = validate_file_name(bad).unwrap_err();
            assert!(
                matches!(err, CheckpointError::BadFileName { .. }),
                "{bad:?}: {err}"
            );
        }
    }
}
