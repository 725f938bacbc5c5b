//! harp's checkpoint storage: numbered, checksummed, atomically committed checkpoints of one
//! job in a directory (local, or a shared filesystem path) — the storage under the consistent
//! checkpoint of DESIGN §2.4, and the guarantee G1 of DESIGN §4: a completed checkpoint
//! restores exactly; a corrupt or partial one is detected and never loaded.
//!
//! # Use
//!
//! ```
//! use harp_checkpoint::{CheckpointStore, JobIdentity};
//! # fn main() -> Result<(), harp_checkpoint::CheckpointError> {
//! # let tmp = std::env::temp_dir().join(format!("harp-ckpt-doc-{}", std::process::id()));
//! // --checkpoint-dir: a new job.
//! let store = CheckpointStore::create(&tmp, JobIdentity::new("job-7", "counter"), 3)?;
//! let mut writer = store.begin(1)?;
//! writer.write_file("driver", b"driver state")?;
//! writer.write_file_from("executor-0", &b"large executor state"[..])?;
//! writer.commit(serde_json::json!({ "version": 120 }))?;
//!
//! // --resume: a new process (maybe a new job id) of the same app.
//! let store = CheckpointStore::open_for_resume(&tmp, "counter", 3)?;
//! assert_eq!(store.identity().job_id, "job-7");
//! let loaded = store.load_latest()?; // every file verified before this returns
//! assert_eq!(loaded.seq(), 1);
//! assert_eq!(loaded.read("driver")?, b"driver state");
//! # std::fs::remove_dir_all(&tmp).ok();
//! # Ok(())
//! # }
//! ```
//!
//! # On-disk layout
//!
//! ```text
//! DIR/
//!   ckpt-00000000000000000041/        one committed checkpoint, seq 41 (20 digits)
//!     MANIFEST.json                   written last; its presence makes the checkpoint exist
//!     driver                          the app's files, names chosen by the writer
//!     executor-0
//!   ckpt-00000000000000000042/
//!     ...
//!   .tmp-ckpt-00000000000000000043-<pid>-<n>/   a checkpoint being written
//!   .tmp-...                          any other temporary entry (probe, replaced, removed)
//! ```
//!
//! `MANIFEST.json` is `{"checksum_crc32": N, "manifest": {...}}`; the manifest holds the
//! format (1), job id, app, seq, creation time (ms since the Unix epoch), the app's metadata
//! (any JSON) and every file with its size and CRC-32; `N` is the CRC-32 of the manifest's
//! exact stored bytes. Entries whose names start with `.tmp-` are never read; other entries
//! that are not `ckpt-<20 digits>` directories are left alone.
//!
//! # Guarantees
//!
//! - **Atomic commit.** A writer works in a `.tmp-` directory: each file is written to a
//!   temporary name, checksummed as it is written, fsynced and renamed; `commit` writes the
//!   manifest the same way, then renames the directory to `ckpt-<seq>` and fsyncs `DIR`. A
//!   crash at any point leaves either the whole checkpoint or nothing visible. A writer
//!   dropped without `commit` removes its directory.
//! - **Nothing unverified is loaded.** [`CheckpointStore::latest_complete`] checks the
//!   manifest's checksum and every file's size and checksum before returning; a checkpoint
//!   that fails is skipped with its reason ([`CheckpointStore::skipped`], and a
//!   `tracing` warning) and the previous one is tried. [`LoadedCheckpoint::read`] checks
//!   the file again as it reads it.
//! - **Retention.** After committing seq `S`, checkpoints with a seq above `S` are removed
//!   (they belong to a run abandoned by a resume from an older one), and of the others only
//!   the newest `keep` with a valid manifest remain — `S` always among them. Data files of
//!   the kept ones are not re-read at commit, so a corrupt one still counts until it ages out.
//! - **Ownership.** [`CheckpointStore::create`] refuses a directory holding checkpoints of
//!   another job or app; [`CheckpointStore::open_for_resume`] checks the app and adopts the
//!   stored job id.
//! - **Clean up.** Opening a store removes temporary entries and checkpoint directories
//!   without a manifest left by interrupted writes. One process writes a directory at a time.
//! - **Errors, not panics.** Every failure is a [`CheckpointError`] naming the path; file
//!   names are simple relative names ([`validate_file_name`]), in writers and in manifests.
//!
//! | module | owns |
//! |---|---|
//! | [`store`] | [`CheckpointStore`]: create/resume, ownership checks, list, latest, pruning, clean up |
//! | [`writer`] | [`CheckpointWriter`], [`FileWriter`]: writing files and committing |
//! | [`reader`] | manifest reading, verification, [`LoadedCheckpoint`], [`FileReader`] |
//! | [`manifest`] | the manifest format and its checksum envelope, [`CheckpointInfo`], [`FileEntry`] |
//! | [`layout`] | on-disk names, [`validate_file_name`] |
//! | [`identity`] | [`JobIdentity`] |
//! | [`error`] | [`CheckpointError`], [`SkippedCheckpoint`], I/O error mapping |
//! | `fsio` | atomic writes, directory fsync, best-effort removal |

pub mod error;
mod fsio;
pub mod identity;
pub mod layout;
pub mod manifest;
pub mod reader;
pub mod store;
pub mod writer;

pub use error::{CheckpointError, SkippedCheckpoint};
pub use identity::JobIdentity;
pub use layout::{validate_file_name, MANIFEST_FILE, MAX_FILE_NAME_BYTES};
pub use manifest::{CheckpointInfo, FileEntry, MANIFEST_BYTES_MAX, MANIFEST_FORMAT};
pub use reader::{FileReader, LoadedCheckpoint};
pub use store::CheckpointStore;
pub use writer::{CheckpointWriter, FileWriter};
