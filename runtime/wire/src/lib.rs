//! harp's wire format: every message between nodes, framed, bounded and validated.
//!
//! Nodes in different processes exchange [`Message`]s over QUIC streams. Each message is an
//! rkyv archive inside a length-prefixed frame ([`frame`]); the decoder refuses oversized
//! prefixes before allocating, validates every payload with rkyv's checked access before
//! use, counts every rejection ([`WireCounters`]) and never panics on bad input (DESIGN §4,
//! G5). The first message of a connection is a [`Hello`] checked for protocol version and
//! job identity ([`handshake`]).
//!
//! | module | owns |
//! |---|---|
//! | [`message`] | [`Message`] and its payload types, [`MessageKind`] (the header's kind byte), conversions to `harp_core` types |
//! | [`frame`] | the frame layout, [`encode`], the incremental [`FrameDecoder`], [`FrameLimits`] |
//! | [`error`] | [`WireError`] (one variant per rejection) and [`WireCounters`] |
//! | [`handshake`] | [`PROTOCOL_VERSION`], [`check_hello`], [`check_welcome`] |
//! | [`parts`] | [`split_rows`]: rows in parts of at most [`PART_BYTES`], each fitting a frame |
//!
//! This crate does no IO: the transport reads chunks from a stream, pushes them into a
//! [`FrameDecoder`] and writes the [`bytes::Bytes`] that [`encode`] returns.

pub mod error;
pub mod frame;
pub mod handshake;
pub mod message;
pub mod parts;

pub use error::{WireCounters, WireCountersSnapshot, WireError};
pub use frame::{
    decode_frame, encode, encode_with, FrameDecoder, FrameLimits, FRAME_BYTES_MAX,
    FRAME_HEADER_BYTES, FRAME_LEN_BYTES,
};
pub use handshake::{check_hello, check_welcome, hello, refusal, PROTOCOL_VERSION};
pub use message::{
    AppliedPartWire, ArchivedMessage, Assignment, CompletionWire, DistancesResult,
    ExecutorSaveResult, HandOffResult, Hello, JobId, JobInfoWire, LostUpdatesResult, Message,
    MessageKind, NodeRole, OptStateWire, ParamKeyWire, PartKeysWire, Placement, ReleaseResult,
    RestoreWire, RowWire, RowsResult, SaveResult, ServerPlace, ShardPlace, ShardRowWire,
    StateFetch, StoppedWire, TaskEnvelope, Welcome, NODE_ID_UNASSIGNED, STATE_FROM_MASTER,
};
pub use parts::{split_rows, KEYS_PER_PART, PART_BYTES};
