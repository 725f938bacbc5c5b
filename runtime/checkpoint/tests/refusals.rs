//! Directories and names that are refused, each with its own error: another job or app,
//! a missing directory, a regular file, an unwritable directory, bad file names, keep 0.

mod common;

use std::fs;

use common::{commit_simple, identity, store};
use harp_checkpoint::{CheckpointError, CheckpointStore, JobIdentity};

#[test]
fn create_refuses_another_jobs_directory() {
    let (tmp, store) = store();
    commit_simple(&store, 1);
    let other = JobIdentity::new("job-2", "counter");
    let err = CheckpointStore::create(tmp.path(), other.clone(), 3).unwrap_err();
    match &err {
        CheckpointError::AnotherJob {
            found, expected, ..
        } => {
            assert_eq!(found, &identity());
            assert_eq!(expected, &other);
        }
        e => panic!("expected AnotherJob, got {e}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("job-1") && msg.contains("job-2"), "{msg}");
    // The same job may reopen it.
    CheckpointStore::create(tmp.path(), identity(), 3).unwrap();
}

#[test]
fn create_refuses_another_apps_directory() {
    let (tmp, store) = store();
    commit_simple(&store, 1);
    let err = CheckpointStore::create(tmp.path(), JobIdentity::new("job-1", "lda"), 3).unwrap_err();
    assert!(matches!(err, CheckpointError::AnotherApp { .. }), "{err}");
}

#[test]
fn resume_refuses_another_app() {
    let (tmp, store) = store();
    commit_simple(&store, 1);
    let err = CheckpointStore::open_for_resume(tmp.path(), "lda", 3).unwrap_err();
    match &err {
        CheckpointError::AnotherApp {
            found_app,
            found_job,
            expected_app,
            ..
        } => {
            assert_eq!(
                (found_app.as_str(), found_job.as_str()),
                ("counter", "job-1")
            );
            assert_eq!(expected_app, "lda");
        }
        e => panic!("expected AnotherApp, got {e}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("counter") && msg.contains("lda"), "{msg}");
}

#[test]
fn resume_from_missing_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let err = CheckpointStore::open_for_resume(&missing, "counter", 3).unwrap_err();
    assert!(
        matches!(&err, CheckpointError::MissingDirectory { path } if *path == missing),
        "{err}"
    );
    assert!(err.to_string().contains("nope"), "{err}");
    assert!(!missing.exists(), "resume must not create the directory");
}

#[test]
fn create_makes_a_missing_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b/c");
    let store = CheckpointStore::create(&dir, identity(), 2).unwrap();
    commit_simple(&store, 1);
    assert!(dir.is_dir());
}

#[test]
fn path_that_is_a_regular_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    fs::write(&file, b"x").unwrap();
    for err in [
        CheckpointStore::create(&file, identity(), 3).unwrap_err(),
        CheckpointStore::open_for_resume(&file, "counter", 3).unwrap_err(),
    ] {
        assert!(
            matches!(&err, CheckpointError::NotADirectory { path, .. } if *path == file),
            "{err}"
        );
    }
}

/// A directory that cannot be created because its parent is a regular file: refused
/// naming the file, by `create` and by `open_for_resume` (works as root too).
#[test]
fn parent_is_a_regular_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    fs::write(&file, b"x").unwrap();
    let dir = file.join("checkpoints");
    for err in [
        CheckpointStore::create(&dir, identity(), 3).unwrap_err(),
        CheckpointStore::open_for_resume(&dir, "counter", 3).unwrap_err(),
    ] {
        match &err {
            CheckpointError::NotADirectory { dir: d, path } => {
                assert_eq!((d, path), (&dir, &file));
            }
            e => panic!("expected NotADirectory, got {e}"),
        }
    }
}

/// A read-only directory is `NotWritable`. Root ignores permission bits; there the case is
/// skipped with a message.
#[cfg(unix)]
#[test]
fn unwritable_directory() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ro");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
    let privileged = fs::write(dir.join("probe"), b"x").is_ok();
    let result = CheckpointStore::create(&dir, identity(), 3);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    if privileged {
        println!("skipped: running with privileges that ignore permission bits (root)");
        return;
    }
    let err = result.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::NotWritable { path, .. } if *path == dir),
        "{err}"
    );
}

#[test]
fn bad_file_names_are_rejected() {
    let (tmp, store) = store();
    let mut writer = store.begin(1).unwrap();
    for name in [
        "",
        ".",
        "..",
        "../escape",
        "a/b",
        "/abs",
        "nul\0",
        ".tmp-x",
        "MANIFEST.json",
    ] {
        let err = writer.write_file(name, b"x").unwrap_err();
        assert!(
            matches!(err, CheckpointError::BadFileName { .. }),
            "{name:?}: {err}"
        );
        let err = writer.write_file_from(name, &b"x"[..]).unwrap_err();
        assert!(
            matches!(err, CheckpointError::BadFileName { .. }),
            "{name:?}: {err}"
        );
        assert!(writer.file(name).is_err(), "{name:?}");
    }
    writer.write_file("ok", b"x").unwrap();
    let err = writer.write_file("ok", b"y").unwrap_err();
    assert!(
        matches!(err, CheckpointError::BadFileName { .. }),
        "duplicate: {err}"
    );
    writer.commit(serde_json::Value::Null).unwrap();
    assert!(!tmp.path().parent().unwrap().join("escape").exists());
    assert_eq!(
        store
            .load_latest()
            .unwrap()
            .file_names()
            .collect::<Vec<_>>(),
        ["ok"]
    );
}

#[test]
fn failing_source_is_a_source_error() {
    struct Broken;
    impl std::io::Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("socket closed"))
        }
    }
    let (_tmp, store) = store();
    let mut writer = store.begin(1).unwrap();
    let err = writer.write_file_from("state", Broken).unwrap_err();
    assert!(matches!(err, CheckpointError::Source { .. }), "{err}");
    assert!(writer.files().is_empty());
}

#[test]
fn keep_zero_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let err = CheckpointStore::create(tmp.path(), identity(), 0).unwrap_err();
    assert!(matches!(err, CheckpointError::KeepZero), "{err}");
}
