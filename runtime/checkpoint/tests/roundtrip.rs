//! Writing and reading back: round trips (in-memory, streamed, `io::Write`), listing,
//! retention (keep-K, replacing a seq, abandoned newer seqs), and leftovers of interrupted
//! writes being ignored and cleaned up.

mod common;

use std::fs;
use std::io::{Read, Write};

use common::{commit_simple, entries, identity, pattern, store};
use harp_checkpoint::{CheckpointError, CheckpointStore};
use serde_json::json;

#[test]
fn round_trip_several_files_including_multi_mib() {
    let (_tmp, store) = store();
    let big = pattern(1, 9 << 20); // 9 MiB, more than the 1 MiB write buffer
    let medium = pattern(2, 300_000);

    let mut writer = store.begin(5).unwrap();
    writer.write_file("driver", b"driver state").unwrap();
    writer.write_file("empty", b"").unwrap();
    let entry = writer.write_file_from("executor-0", &big[..]).unwrap();
    assert_eq!(entry.size, big.len() as u64);
    let mut file = writer.file("executor-1").unwrap();
    for chunk in medium.chunks(7_777) {
        file.write_all(chunk).unwrap();
    }
    assert_eq!(file.bytes_written(), medium.len() as u64);
    file.finish().unwrap();
    let metadata = json!({ "version": 120, "loss": 0.5, "tasks": ["t1", "t2"] });
    let committed = writer.commit(metadata.clone()).unwrap();
    assert_eq!(committed.seq, 5);
    assert_eq!(committed.identity, identity());

    let loaded = store.latest_complete().unwrap().expect("a checkpoint");
    assert_eq!(loaded.seq(), 5);
    assert_eq!(loaded.metadata(), &metadata);
    assert_eq!(
        loaded.file_names().collect::<Vec<_>>(),
        ["driver", "empty", "executor-0", "executor-1"]
    );
    assert_eq!(loaded.read("driver").unwrap(), b"driver state");
    assert_eq!(loaded.read("empty").unwrap(), b"");
    assert_eq!(loaded.read("executor-0").unwrap(), big);
    assert_eq!(loaded.read("executor-1").unwrap(), medium);
    let mut streamed = Vec::new();
    loaded
        .open("executor-0")
        .unwrap()
        .read_to_end(&mut streamed)
        .unwrap();
    assert_eq!(streamed, big);
    assert!(store.skipped().is_empty());
    assert!(matches!(
        loaded.read("nope"),
        Err(CheckpointError::NotInCheckpoint { seq: 5, .. })
    ));
    assert_eq!(
        loaded.info().total_bytes(),
        (12 + big.len() + medium.len()) as u64
    );
}

#[test]
fn keep_k_prunes_to_the_newest() {
    let (tmp, store) = store(); // keep 3
    for seq in 1..=6 {
        commit_simple(&store, seq);
        let seqs: Vec<u64> = store.list().unwrap().iter().map(|i| i.seq).collect();
        let expected: Vec<u64> = (seq.saturating_sub(2).max(1)..=seq).collect();
        assert_eq!(seqs, expected, "after committing {seq}");
    }
    assert_eq!(entries(tmp.path()).len(), 3, "{:?}", entries(tmp.path()));
    assert_eq!(store.load_latest().unwrap().seq(), 6);
}

#[test]
fn keep_one_never_removes_the_one_just_written() {
    let tmp = tempfile::tempdir().unwrap();
    let store = CheckpointStore::create(tmp.path(), identity(), 1).unwrap();
    for seq in [3, 9, 10] {
        commit_simple(&store, seq);
        let seqs: Vec<u64> = store.list().unwrap().iter().map(|i| i.seq).collect();
        assert_eq!(seqs, [seq]);
    }
}

#[test]
fn recommitting_a_seq_replaces_it_and_drops_newer_ones() {
    let (_tmp, store) = store();
    for seq in 1..=3 {
        commit_simple(&store, seq);
    }
    // A resume went back to 1; the job writes 2 again: 3 belongs to the abandoned run.
    let mut writer = store.begin(2).unwrap();
    writer.write_file("a", b"second run").unwrap();
    writer.commit(json!("rerun")).unwrap();
    let seqs: Vec<u64> = store.list().unwrap().iter().map(|i| i.seq).collect();
    assert_eq!(seqs, [1, 2]);
    let loaded = store.load_latest().unwrap();
    assert_eq!(loaded.metadata(), &json!("rerun"));
    assert_eq!(loaded.read("a").unwrap(), b"second run");
    assert_eq!(loaded.file_names().count(), 1);
}

#[test]
fn dropped_writer_leaves_no_checkpoint() {
    let (tmp, store) = store();
    commit_simple(&store, 1);
    let mut writer = store.begin(2).unwrap();
    writer.write_file("a", &pattern(2, 4096)).unwrap();
    drop(writer);
    assert_eq!(entries(tmp.path()), ["ckpt-00000000000000000001"]);
    assert_eq!(store.load_latest().unwrap().seq(), 1);
}

#[test]
fn half_written_checkpoint_is_ignored_and_cleaned_up() {
    let (tmp, store) = store();
    commit_simple(&store, 1);
    // A checkpoint directory whose manifest never got written, and a crashed writer's temp.
    let half = tmp.path().join("ckpt-00000000000000000002");
    fs::create_dir(&half).unwrap();
    fs::write(half.join("a"), b"partial").unwrap();
    let temp = tmp.path().join(".tmp-ckpt-00000000000000000003-1-1");
    fs::create_dir(&temp).unwrap();
    fs::write(temp.join("a"), b"partial").unwrap();

    let loaded = store.latest_complete().unwrap().unwrap();
    assert_eq!(loaded.seq(), 1);
    let skipped = store.skipped();
    assert_eq!(skipped.len(), 1);
    assert!(
        matches!(skipped[0].reason, CheckpointError::Incomplete { .. }),
        "{}",
        skipped[0]
    );
    assert_eq!(store.list().unwrap().len(), 1);

    // The next process opening the directory removes both leftovers.
    let reopened = CheckpointStore::create(tmp.path(), identity(), 3).unwrap();
    assert_eq!(entries(tmp.path()), ["ckpt-00000000000000000001"]);
    assert_eq!(reopened.load_latest().unwrap().seq(), 1);
}

#[test]
fn foreign_entries_are_left_alone() {
    let (tmp, store) = store();
    fs::write(tmp.path().join("NOTES.txt"), b"mine").unwrap();
    commit_simple(&store, 1);
    CheckpointStore::create(tmp.path(), identity(), 3).unwrap();
    assert_eq!(
        entries(tmp.path()),
        ["NOTES.txt", "ckpt-00000000000000000001"]
    );
}

#[test]
fn resume_adopts_the_stored_job_id_and_continues() {
    let (tmp, store) = store();
    commit_simple(&store, 1);
    let resumed = CheckpointStore::open_for_resume(tmp.path(), "counter", 3).unwrap();
    assert_eq!(resumed.identity(), &identity());
    let loaded = resumed.load_latest().unwrap();
    assert_eq!(loaded.info().identity.job_id, "job-1");
    commit_simple(&resumed, 2);
    assert_eq!(store.load_latest().unwrap().seq(), 2);
}

/// Stores, writers and loaded checkpoints can move to other threads (e.g. a blocking task).
#[test]
fn handles_are_send() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CheckpointStore>();
    send::<harp_checkpoint::CheckpointWriter>();
    send_sync::<harp_checkpoint::LoadedCheckpoint>();
    send_sync::<CheckpointError>();
}
