//! Damaged checkpoints are detected before anything is loaded: a flipped byte, a truncated
//! or missing file, a corrupt or unparseable manifest. Each is skipped with its reason and
//! the previous complete checkpoint is returned; with none left, `None` / `NoCompleteCheckpoint`.

mod common;

use std::fs::{self, OpenOptions};

use common::{commit_simple, flip_byte, manifest_path, store};
use harp_checkpoint::{CheckpointError, CheckpointStore};

#[test]
fn flipped_byte_in_a_data_file_is_skipped_as_corrupt() {
    let (_tmp, store) = store();
    commit_simple(&store, 1);
    let newest = commit_simple(&store, 2);
    let damaged = newest.path.join("a");
    flip_byte(&damaged, 500);

    let loaded = store.latest_complete().unwrap().unwrap();
    assert_eq!(loaded.seq(), 1);
    let skipped = store.skipped();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].seq, 2);
    match &skipped[0].reason {
        CheckpointError::Corrupt {
            path,
            expected,
            actual,
        } => {
            assert_eq!(path, &damaged);
            assert_ne!(expected, actual);
        }
        other => panic!("expected Corrupt, got {other}"),
    }
}

/// One file of a listed checkpoint is read and checked alone: a damaged file is refused
/// with its reason, and a sound one beside it reads although the other is damaged.
#[test]
fn one_file_of_a_listed_checkpoint_is_checked_alone() {
    let (_tmp, store) = store();
    let info = commit_simple(&store, 1);
    flip_byte(&info.path.join("a"), 500);
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].read_file("b").unwrap(), b"b of 1");
    match listed[0].read_file("a") {
        Err(CheckpointError::Corrupt { path, .. }) => assert_eq!(path, info.path.join("a")),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(matches!(
        listed[0].read_file("c"),
        Err(CheckpointError::NotInCheckpoint { seq: 1, .. })
    ));
}

#[test]
fn truncated_file_is_skipped() {
    let (_tmp, store) = store();
    commit_simple(&store, 1);
    let newest = commit_simple(&store, 2);
    let damaged = newest.path.join("a");
    OpenOptions::new()
        .write(true)
        .open(&damaged)
        .unwrap()
        .set_len(10)
        .unwrap();

    assert_eq!(store.latest_complete().unwrap().unwrap().seq(), 1);
    match &store.skipped()[0].reason {
        CheckpointError::Truncated {
            path,
            expected_bytes: 1000,
            actual_bytes: 10,
        } => {
            assert_eq!(path, &damaged)
        }
        other => panic!("expected Truncated, got {other}"),
    }
}

#[test]
fn missing_file_is_skipped() {
    let (_tmp, store) = store();
    commit_simple(&store, 1);
    let newest = commit_simple(&store, 2);
    fs::remove_file(newest.path.join("b")).unwrap();

    assert_eq!(store.latest_complete().unwrap().unwrap().seq(), 1);
    let reason = &store.skipped()[0].reason;
    assert!(
        matches!(reason, CheckpointError::MissingFile { path } if path.ends_with("b")),
        "{reason}"
    );
}

#[test]
fn corrupted_manifest_is_skipped() {
    let (_tmp, store) = store();
    commit_simple(&store, 1);
    let newest = commit_simple(&store, 2);
    let manifest = manifest_path(&newest);
    // Change the app's name inside the checksummed body: still valid JSON, wrong checksum.
    let text = fs::read_to_string(&manifest).unwrap();
    fs::write(&manifest, text.replace("\"counter\"", "\"cOunter\"")).unwrap();

    assert_eq!(store.latest_complete().unwrap().unwrap().seq(), 1);
    let reason = &store.skipped()[0].reason;
    assert!(
        matches!(reason, CheckpointError::Corrupt { path, .. } if *path == manifest),
        "{reason}"
    );
    // Listing shows only checkpoints whose manifest is valid.
    assert_eq!(store.list().unwrap().len(), 1);
}

#[test]
fn unparseable_manifest_is_skipped_as_bad_manifest() {
    let (_tmp, store) = store();
    commit_simple(&store, 1);
    let newest = commit_simple(&store, 2);
    let manifest = manifest_path(&newest);
    let bytes = fs::read(&manifest).unwrap();
    fs::write(&manifest, &bytes[..bytes.len() / 2]).unwrap();

    assert_eq!(store.latest_complete().unwrap().unwrap().seq(), 1);
    let reason = &store.skipped()[0].reason;
    assert!(
        matches!(reason, CheckpointError::BadManifest { .. }),
        "{reason}"
    );
    assert!(reason.to_string().contains("MANIFEST.json"), "{reason}");
}

#[test]
fn all_corrupt_gives_none_and_no_complete_checkpoint() {
    let (tmp, store) = store();
    let first = commit_simple(&store, 1);
    let second = commit_simple(&store, 2);
    flip_byte(&first.path.join("b"), 0);
    fs::remove_file(second.path.join("a")).unwrap();

    assert!(store.latest_complete().unwrap().is_none());
    assert_eq!(store.skipped().len(), 2);
    match store.load_latest() {
        Err(CheckpointError::NoCompleteCheckpoint { dir, skipped }) => {
            assert_eq!(dir, tmp.path());
            let seqs: Vec<u64> = skipped.iter().map(|s| s.seq).collect();
            assert_eq!(seqs, [2, 1], "newest first");
        }
        other => panic!("expected NoCompleteCheckpoint, got {other:?}"),
    }
}

#[test]
fn empty_directory_has_no_checkpoint() {
    let (_tmp, store) = store();
    assert!(store.latest_complete().unwrap().is_none());
    let err = store.load_latest().unwrap_err();
    assert!(
        matches!(err, CheckpointError::NoCompleteCheckpoint { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("holds no checkpoints"), "{err}");
}

#[test]
fn file_changed_after_load_is_caught_by_read() {
    let (_tmp, store) = store();
    let info = commit_simple(&store, 1);
    let loaded = store.load_latest().unwrap();
    flip_byte(&info.path.join("a"), 3);
    let err = loaded.read("a").unwrap_err();
    assert!(matches!(err, CheckpointError::Corrupt { .. }), "{err}");
}

#[test]
fn resume_with_only_bad_manifests_is_no_complete_checkpoint() {
    let (tmp, store) = store();
    let info = commit_simple(&store, 1);
    fs::write(manifest_path(&info), b"{}").unwrap();
    let err = CheckpointStore::open_for_resume(tmp.path(), "counter", 3).unwrap_err();
    match err {
        CheckpointError::NoCompleteCheckpoint { skipped, .. } => {
            assert!(matches!(
                skipped[0].reason,
                CheckpointError::BadManifest { .. }
            ))
        }
        other => panic!("expected NoCompleteCheckpoint, got {other}"),
    }
}
