//! What can go wrong on the wire, and how often it did.
//!
//! This module owns [`WireError`], one variant per condition a peer's bytes can be rejected
//! for (the crate's only error type), and [`WireCounters`], the per-node tally of decoded
//! frames and of each rejection. The decoder records its own rejections; a caller that
//! rejects a handshake ([`check_hello`](crate::check_hello)) records it with
//! [`WireCounters::record_error`]. Every rejection is counted exactly once.

use crate::message::MessageKind;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why bytes from a peer (or a message to send) were refused. After any of these the
/// connection is closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A length prefix (or a message to encode) over the frame limit.
    #[error("frame of {frame_bytes} bytes exceeds the limit of {frame_bytes_max} bytes")]
    FrameTooLarge {
        frame_bytes: u64,
        frame_bytes_max: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame")]
    Truncated,
    /// A header kind byte that names no message.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// The header's kind byte and the payload's message disagree.
    #[error("header kind {header} does not match payload kind {payload}")]
    KindMismatch { header: u8, payload: u8 },
    /// The payload failed rkyv validation (or could not be deserialized).
    #[error("invalid payload: {0}")]
    Invalid(String),
    /// A handshake from another protocol version.
    #[error("protocol version {theirs} is not ours ({ours})")]
    ProtocolVersion { ours: u32, theirs: u32 },
    /// A handshake from a node of another job.
    #[error("peer belongs to another job")]
    WrongJob,
    /// A frame too short to hold a kind byte and a payload.
    #[error("empty frame")]
    EmptyFrame,
    /// A message that rkyv could not serialize (ours, not a peer's).
    #[error("cannot encode message: {0}")]
    Encode(String),
}

/// Frames decoded and rejections, by kind. Shared (`Arc`) by every decoder of a node; all
/// updates are relaxed atomic adds.
#[derive(Debug)]
pub struct WireCounters {
    frames_decoded: AtomicU64,
    payload_bytes_decoded: AtomicU64,
    frames_by_kind: [AtomicU64; MessageKind::COUNT],
    frame_too_large: AtomicU64,
    truncated: AtomicU64,
    unknown_kind: AtomicU64,
    kind_mismatch: AtomicU64,
    invalid: AtomicU64,
    protocol_version: AtomicU64,
    wrong_job: AtomicU64,
    empty_frame: AtomicU64,
    encode: AtomicU64,
}

/// A plain copy of [`WireCounters`] at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WireCountersSnapshot {
    pub frames_decoded: u64,
    pub payload_bytes_decoded: u64,
    /// Decoded frames per kind, indexed by [`MessageKind::index`] (one entry per kind).
    pub frames_by_kind: Vec<u64>,
    pub frame_too_large: u64,
    pub truncated: u64,
    pub unknown_kind: u64,
    pub kind_mismatch: u64,
    pub invalid: u64,
    pub protocol_version: u64,
    pub wrong_job: u64,
    pub empty_frame: u64,
    pub encode: u64,
}

impl WireCountersSnapshot {
    /// Every rejection, whatever its kind.
    pub fn rejections(&self) -> u64 {
        self.frame_too_large
            + self.truncated
            + self.unknown_kind
            + self.kind_mismatch
            + self.invalid
            + self.protocol_version
            + self.wrong_job
            + self.empty_frame
            + self.encode
    }

    /// Decoded frames of one kind.
    pub fn frames_of(&self, kind: MessageKind) -> u64 {
        self.frames_by_kind.get(kind.index()).copied().unwrap_or(0)
    }
}

impl Default for WireCounters {
    fn default() -> Self {
        let zero = || AtomicU64::new(0);
        Self {
            frames_decoded: zero(),
            payload_bytes_decoded: zero(),
            frames_by_kind: std::array::from_fn(|_| zero()),
            frame_too_large: zero(),
            truncated: zero(),
            unknown_kind: zero(),
            kind_mismatch: zero(),
            invalid: zero(),
            protocol_version: zero(),
            wrong_job: zero(),
            empty_frame: zero(),
            encode: zero(),
        }
    }
}

impl WireCounters {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one decoded frame of `kind` with `payload_bytes` of payload.
    pub fn record_frame(&self, kind: MessageKind, payload_bytes: usize) {
        self.frames_decoded.fetch_add(1, Ordering::Relaxed);
        self.payload_bytes_decoded
            .fetch_add(payload_bytes as u64, Ordering::Relaxed);
        self.frames_by_kind[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one rejection.
    pub fn record_error(&self, error: &WireError) {
        let counter = match error {
            WireError::FrameTooLarge { .. } => &self.frame_too_large,
            WireError::Truncated => &self.truncated,
            WireError::UnknownKind(_) => &self.unknown_kind,
            WireError::KindMismatch { .. } => &self.kind_mismatch,
            WireError::Invalid(_) => &self.invalid,
            WireError::ProtocolVersion { .. } => &self.protocol_version,
            WireError::WrongJob => &self.wrong_job,
            WireError::EmptyFrame => &self.empty_frame,
            WireError::Encode(_) => &self.encode,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> WireCountersSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WireCountersSnapshot {
            frames_decoded: get(&self.frames_decoded),
            payload_bytes_decoded: get(&self.payload_bytes_decoded),
            frames_by_kind: self.frames_by_kind.iter().map(get).collect(),
            frame_too_large: get(&self.frame_too_large),
            truncated: get(&self.truncated),
            unknown_kind: get(&self.unknown_kind),
            kind_mismatch: get(&self.kind_mismatch),
            invalid: get(&self.invalid),
            protocol_version: get(&self.protocol_version),
            wrong_job: get(&self.wrong_job),
            empty_frame: get(&self.empty_frame),
            encode: get(&self.encode),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_its_own_counter() {
        let errors = [
            WireError::FrameTooLarge {
                frame_bytes: 9,
                frame_bytes_max: 8,
            },
            WireError::Truncated,
            WireError::UnknownKind(0),
            WireError::KindMismatch {
                header: 1,
                payload: 2,
            },
            WireError::Invalid("x".into()),
            WireError::ProtocolVersion { ours: 1, theirs: 2 },
            WireError::WrongJob,
            WireError::EmptyFrame,
            WireError::Encode("x".into()),
        ];
        let counters = WireCounters::new();
        for (i, e) in errors.iter().enumerate() {
            for _ in 0..=i {
                counters.record_error(e);
            }
        }
        let s = counters.snapshot();
        let got = [
            s.frame_too_large,
            s.truncated,
            s.unknown_kind,
            s.kind_mismatch,
            s.invalid,
            s.protocol_version,
            s.wrong_job,
            s.empty_frame,
            s.encode,
        ];
        assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(s.rejections(), 45);
        assert_eq!(s.frames_decoded, 0);
    }

    #[test]
    fn messages_are_short_and_lowercase() {
        let e = WireError::FrameTooLarge {
            frame_bytes: 100,
            frame_bytes_max: 10,
        };
        assert_eq!(
            e.to_string(),
            "frame of 100 bytes exceeds the limit of 10 bytes"
        );
        assert_eq!(
            WireError::WrongJob.to_string(),
            "peer belongs to another job"
        );
    }
}
