//! [`Message::StateChunk`] frames without copying their data: the executor state a node
//! sends in 8 MiB chunks is the bulk of what crosses the wire during a move, and both the
//! generic [`encode`](super::encode) (copy into the frame) and the generic
//! [`FrameDecoder`](super::FrameDecoder) (copy into an aligned buffer, then into a `Vec`)
//! would touch every byte once more than the transfer itself needs.
//!
//! The bytes are exactly the generic encoding's, so either side may be the generic one. rkyv
//! writes a chunk's data first (payload offset 0) and the archive's root after it, aligned:
//!
//! ```text
//! | L u32 LE | kind | data: N bytes | zeros up to the root's alignment | root of ArchivedMessage |
//! ```
//!
//! - [`encode_state_chunk`] returns that frame as three [`Bytes`]: the 5 header bytes, the
//!   caller's data (not copied) and the tail (padding and root). The root is rkyv's own
//!   encoding of the same chunk with no data, with its data pointer and length set to the
//!   data in front of it; tests check the result equals [`encode`](super::encode) byte for
//!   byte.
//! - [`StateChunkReader`] takes a stream's pieces as they arrive (kept, not copied), checks
//!   the header as soon as it is in (length within [`FrameLimits`], kind `StateChunk`) and
//!   refuses bytes past the frame; at the end of the stream it validates the root with
//!   rkyv's checked access and requires the tail to be exactly what [`encode_state_chunk`]
//!   writes for those fields and that data length. The data comes back as the received
//!   pieces ([`ReceivedStateChunk`]), for the caller to copy once, into place. Every frame
//!   and every rejection is counted in [`WireCounters`], like the generic decoder does.

use super::{frame_body_len, FrameLimits, FRAME_HEADER_BYTES};
use crate::error::{WireCounters, WireError};
use crate::message::{ArchivedMessage, Message, MessageKind};
use bytes::Bytes;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use std::sync::{Arc, OnceLock};

/// Bytes of the root of an archived [`Message`] (rkyv writes the whole enum).
const ROOT_BYTES: usize = std::mem::size_of::<ArchivedMessage>();
/// The root's alignment: rkyv pads the data up to it.
const ROOT_ALIGN: usize = std::mem::align_of::<ArchivedMessage>();
/// An archived `Vec<u8>` is a 32-bit relative pointer and a 32-bit length.
const REL_PTR_BYTES: usize = 4;
const _: () = assert!(std::mem::size_of::<rkyv::vec::ArchivedVec<u8>>() == 2 * REL_PTR_BYTES);

/// A [`Message::StateChunk`] frame in the three parts to write, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateChunkFrame {
    /// The length prefix and the kind byte.
    pub head: Bytes,
    /// The chunk's data, as the caller gave it.
    pub data: Bytes,
    /// Padding and the archive's root.
    pub tail: Bytes,
}

impl StateChunkFrame {
    /// Bytes of the whole frame.
    pub fn len(&self) -> usize {
        self.head.len() + self.data.len() + self.tail.len()
    }

    /// Whether the frame has no bytes (never: a frame has at least its header).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parts in the order they go on the stream.
    pub fn into_parts(self) -> [Bytes; 3] {
        [self.head, self.data, self.tail]
    }
}

/// Encodes `Message::StateChunk { request_id, total, offset, data }` as a frame whose data
/// part is `data` itself; refused with [`WireError::FrameTooLarge`] over `limits`.
pub fn encode_state_chunk(
    request_id: u64,
    total: u64,
    offset: u64,
    data: Bytes,
    limits: &FrameLimits,
) -> Result<StateChunkFrame, WireError> {
    let padded = padded_len(data.len());
    let frame_bytes = (1 + padded + ROOT_BYTES) as u64;
    let too_large = WireError::FrameTooLarge {
        frame_bytes,
        frame_bytes_max: limits.frame_bytes_max,
    };
    if frame_bytes > limits.frame_bytes_max as u64 {
        return Err(too_large);
    }
    let len = u32::try_from(frame_bytes).map_err(|_| too_large)?;
    let mut tail = vec![0u8; padded - data.len()];
    tail.extend_from_slice(&root(request_id, total, offset, data.len())?);
    let mut head = len.to_le_bytes().to_vec();
    head.push(MessageKind::StateChunk.as_u8());
    Ok(StateChunkFrame {
        head: Bytes::from(head),
        data,
        tail: Bytes::from(tail),
    })
}

/// `data_len` rounded up to the root's alignment: where rkyv puts the root.
fn padded_len(data_len: usize) -> usize {
    data_len.next_multiple_of(ROOT_ALIGN)
}

/// The root of a chunk of `data_len` bytes lying at payload offset 0, the root itself
/// at [`padded_len`]`(data_len)`.
fn root(
    request_id: u64,
    total: u64,
    offset: u64,
    data_len: usize,
) -> Result<[u8; ROOT_BYTES], WireError> {
    let mut root = empty_chunk_root(request_id, total, offset)?;
    let layout = layout()?;
    let at = layout.data_field;
    // The data starts `padded + at` bytes before the pointer (relative pointers count from
    // their own position).
    let back = i32::try_from(padded_len(data_len) + at)
        .map_err(|_| WireError::Encode(format!("a state chunk of {data_len} bytes")))?;
    let len = u32::try_from(data_len)
        .map_err(|_| WireError::Encode(format!("a state chunk of {data_len} bytes")))?;
    root[at..at + REL_PTR_BYTES].copy_from_slice(&(-back).to_le_bytes());
    root[at + REL_PTR_BYTES..at + 2 * REL_PTR_BYTES].copy_from_slice(&len.to_le_bytes());
    Ok(root)
}

/// rkyv's encoding of the chunk with no data: its payload is the root alone (the empty
/// data is "at" offset 0, where the root starts).
fn empty_chunk_root(
    request_id: u64,
    total: u64,
    offset: u64,
) -> Result<[u8; ROOT_BYTES], WireError> {
    let empty = Message::StateChunk {
        request_id,
        total,
        offset,
        data: Vec::new(),
    };
    let frame = super::encode(&empty)?;
    frame
        .get(FRAME_HEADER_BYTES..)
        .and_then(|payload| <[u8; ROOT_BYTES]>::try_from(payload).ok())
        .ok_or_else(|| layout_changed(format!("{} bytes for no data", frame.len())))
}

/// Where the data field sits in the root; found once from rkyv's own encoding.
struct Layout {
    data_field: usize,
}

fn layout() -> Result<&'static Layout, WireError> {
    static LAYOUT: OnceLock<Result<Layout, WireError>> = OnceLock::new();
    LAYOUT
        .get_or_init(|| {
            let root = empty_chunk_root(0, 0, 0)?;
            let mut aligned = AlignedVec::<16>::with_capacity(ROOT_BYTES);
            aligned.extend_from_slice(&root);
            let archived = rkyv::access::<ArchivedMessage, rancor::Error>(&aligned)
                .map_err(|e| layout_changed(e.to_string()))?;
            let ArchivedMessage::StateChunk { data, .. } = archived else {
                return Err(layout_changed("another message".into()));
            };
            let data_field =
                (data as *const _ as usize).wrapping_sub(archived as *const _ as usize);
            if data_field + 2 * REL_PTR_BYTES > ROOT_BYTES {
                return Err(layout_changed(format!("data field at {data_field}")));
            }
            Ok(Layout { data_field })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn layout_changed(what: String) -> WireError {
    WireError::Encode(format!(
        "the archived StateChunk is not laid out as expected ({what})"
    ))
}

/// A [`Message::StateChunk`] read from a stream by [`StateChunkReader`], its data still in
/// the pieces it arrived in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedStateChunk {
    pub request_id: u64,
    pub total: u64,
    pub offset: u64,
    data: Vec<Bytes>,
    len: usize,
}

impl ReceivedStateChunk {
    /// Bytes of data.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The data, in order, as the pieces it arrived in.
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        self.data.iter().map(|piece| piece.as_ref())
    }

    /// Copies the data into `dest`, which must be exactly [`len`](Self::len) bytes long;
    /// says whether it was.
    pub fn copy_to(&self, dest: &mut [u8]) -> bool {
        if dest.len() != self.len {
            return false;
        }
        let mut at = 0;
        for piece in self.pieces() {
            dest[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        true
    }
}

/// Reads the one [`Message::StateChunk`] frame of a bulk stream, keeping the pieces
/// instead of copying them. Use: [`push`](Self::push) every piece read from the stream (an
/// error means: stop reading, close the connection), then [`finish`](Self::finish) at its
/// end. Holds at most the frame it declared.
#[derive(Debug)]
pub struct StateChunkReader {
    limits: FrameLimits,
    counters: Arc<WireCounters>,
    header: [u8; FRAME_HEADER_BYTES],
    header_len: usize,
    /// Everything after the header (the payload), as pushed.
    pieces: Vec<Bytes>,
    payload_in: usize,
    /// Payload bytes the header declares, known once its length prefix is in.
    payload_len: Option<usize>,
    poisoned: Option<WireError>,
}

impl StateChunkReader {
    pub fn new(limits: FrameLimits, counters: Arc<WireCounters>) -> Self {
        Self {
            limits,
            counters,
            header: [0; FRAME_HEADER_BYTES],
            header_len: 0,
            pieces: Vec::new(),
            payload_in: 0,
            payload_len: None,
            poisoned: None,
        }
    }

    /// Takes the next piece of the stream. The header is checked as soon as it is in; bytes
    /// past the declared frame are refused. After an error, every call returns it again.
    pub fn push(&mut self, mut piece: Bytes) -> Result<(), WireError> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        while self.header_len < FRAME_HEADER_BYTES && !piece.is_empty() {
            let take = (FRAME_HEADER_BYTES - self.header_len).min(piece.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&piece[..take]);
            self.header_len += take;
            piece = piece.slice(take..);
            if self.header_len == FRAME_HEADER_BYTES {
                let checked = self.check_header();
                self.settle(checked)?;
            }
        }
        if piece.is_empty() {
            return Ok(());
        }
        let declared = self.payload_len.unwrap_or(0);
        if self.payload_in + piece.len() > declared {
            return self.settle(Err(WireError::Invalid(format!(
                "bytes past the end of a {declared}-byte state chunk payload"
            ))));
        }
        self.payload_in += piece.len();
        self.pieces.push(piece);
        Ok(())
    }

    /// The stream ended: the chunk, or why its frame is refused.
    pub fn finish(mut self) -> Result<ReceivedStateChunk, WireError> {
        if let Some(e) = self.poisoned.take() {
            return Err(e);
        }
        let checked = self.check_payload();
        match checked {
            Ok(chunk) => {
                self.counters
                    .record_frame(MessageKind::StateChunk, self.payload_in);
                Ok(chunk)
            }
            Err(e) => {
                self.counters.record_error(&e);
                Err(e)
            }
        }
    }

    fn settle(&mut self, checked: Result<(), WireError>) -> Result<(), WireError> {
        if let Err(e) = &checked {
            self.counters.record_error(e);
            self.poisoned = Some(e.clone());
            self.pieces = Vec::new();
        }
        checked
    }

    fn check_header(&mut self) -> Result<(), WireError> {
        let body_len = frame_body_len(self.header, &self.limits)?;
        let [.., kind] = self.header;
        match MessageKind::from_u8(kind) {
            None => return Err(WireError::UnknownKind(kind)),
            Some(MessageKind::StateChunk) => {}
            Some(other) => {
                return Err(WireError::Invalid(format!(
                    "a {other:?} frame where a state chunk was expected"
                )))
            }
        }
        self.payload_len = Some(body_len);
        Ok(())
    }

    /// The whole payload is in: validate the root and the tail, cut out the data.
    fn check_payload(&mut self) -> Result<ReceivedStateChunk, WireError> {
        let Some(payload_len) = self.payload_len else {
            return Err(if self.header_len == 0 {
                WireError::Invalid("a stream without a state chunk".into())
            } else {
                WireError::Truncated
            });
        };
        if self.payload_in < payload_len {
            return Err(WireError::Truncated);
        }
        let invalid = |why: &str| WireError::Invalid(format!("state chunk: {why}"));
        let root_at = payload_len
            .checked_sub(ROOT_BYTES)
            .ok_or_else(|| invalid("shorter than its root"))?;
        let layout = layout()?;
        let mut root = [0u8; ROOT_BYTES];
        copy_range(&self.pieces, root_at, &mut root);
        let field = |at: usize| {
            let mut word = [0u8; REL_PTR_BYTES];
            word.copy_from_slice(&root[at..at + REL_PTR_BYTES]);
            word
        };
        let data_len = u32::from_le_bytes(field(layout.data_field + REL_PTR_BYTES)) as usize;
        if padded_len(data_len) != root_at {
            return Err(invalid("its data length does not match its frame"));
        }
        // The same root with no data is what rkyv encodes for an empty chunk: validate
        // that with the checked access, and read the fields from it.
        let mut empty = root;
        let back = i32::try_from(layout.data_field).map_err(|_| invalid("layout"))?;
        empty[layout.data_field..layout.data_field + REL_PTR_BYTES]
            .copy_from_slice(&(-back).to_le_bytes());
        empty[layout.data_field + REL_PTR_BYTES..layout.data_field + 2 * REL_PTR_BYTES]
            .copy_from_slice(&0u32.to_le_bytes());
        let mut aligned = AlignedVec::<16>::with_capacity(ROOT_BYTES);
        aligned.extend_from_slice(&empty);
        let archived = rkyv::access::<ArchivedMessage, rancor::Error>(&aligned)
            .map_err(|e| WireError::Invalid(e.to_string()))?;
        let ArchivedMessage::StateChunk {
            request_id,
            total,
            offset,
            ..
        } = archived
        else {
            return Err(WireError::KindMismatch {
                header: MessageKind::StateChunk.as_u8(),
                payload: archived.kind().as_u8(),
            });
        };
        let (request_id, total, offset) = (
            request_id.to_native(),
            total.to_native(),
            offset.to_native(),
        );
        // Padding and pointer exactly as encoded: nothing else passes for a chunk.
        let mut tail = vec![0u8; payload_len - data_len];
        copy_range(&self.pieces, data_len, &mut tail);
        let padding = root_at - data_len;
        let want_root = self::root(request_id, total, offset, data_len)?;
        if tail[..padding].iter().any(|b| *b != 0) || tail[padding..] != want_root[..] {
            return Err(invalid("its tail is not the encoding of its fields"));
        }
        Ok(ReceivedStateChunk {
            request_id,
            total,
            offset,
            data: cut(std::mem::take(&mut self.pieces), data_len),
            len: data_len,
        })
    }
}

/// Copies bytes `from..from + out.len()` of the concatenated `pieces` into `out` (the
/// caller checked they are there).
fn copy_range(pieces: &[Bytes], from: usize, out: &mut [u8]) {
    let mut start = 0;
    let mut written = 0;
    for piece in pieces {
        let end = start + piece.len();
        if end > from && written < out.len() {
            let skip = from.saturating_sub(start);
            let take = (piece.len() - skip).min(out.len() - written);
            out[written..written + take].copy_from_slice(&piece[skip..skip + take]);
            written += take;
        }
        start = end;
    }
}

/// The first `len` bytes of the concatenated `pieces`, as slices of them.
fn cut(pieces: Vec<Bytes>, len: usize) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(pieces.len());
    let mut left = len;
    for piece in pieces {
        if left == 0 {
            break;
        }
        let take = piece.len().min(left);
        out.push(piece.slice(..take));
        left -= take;
    }
    out
}

#[cfg(test)]
mod tests;
