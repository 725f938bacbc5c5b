//! Helpers shared by the integration tests: stores in temporary directories, deterministic
//! content, and ways to damage files on disk.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use harp_checkpoint::{CheckpointInfo, CheckpointStore, JobIdentity, MANIFEST_FILE};
use serde_json::json;

pub fn identity() -> JobIdentity {
    JobIdentity::new("job-1", "counter")
}

/// A fresh store (keep 3) in a fresh temporary directory.
pub fn store() -> (tempfile::TempDir, CheckpointStore) {
    let tmp = tempfile::tempdir().unwrap();
    let store = CheckpointStore::create(tmp.path(), identity(), 3).unwrap();
    (tmp, store)
}

/// `len` deterministic pseudo-random bytes (an LCG seeded by `seed`).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) as u8
        })
        .collect()
}

/// Commits checkpoint `seq` with files `a` and `b` (content depends on `seq`).
pub fn commit_simple(store: &CheckpointStore, seq: u64) -> CheckpointInfo {
    let mut writer = store.begin(seq).unwrap();
    writer.write_file("a", &pattern(seq, 1000)).unwrap();
    writer
        .write_file("b", format!("b of {seq}").as_bytes())
        .unwrap();
    writer.commit(json!({ "seq": seq })).unwrap()
}

pub fn flip_byte(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

pub fn manifest_path(info: &CheckpointInfo) -> PathBuf {
    info.path.join(MANIFEST_FILE)
}

/// The names of the entries of `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}
