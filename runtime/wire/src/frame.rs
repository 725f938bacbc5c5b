//! Frames: how messages are cut into bytes on a stream and put back together.
//!
//! A frame is
//!
//! ```text
//! | L: u32 little-endian | kind: u8 | payload: L - 1 bytes of rkyv |
//! ```
//!
//! where `L` counts everything after the length prefix (the kind byte and the payload), the
//! kind byte is the message's [`MessageKind`] (readable for counting and diagnostics before
//! any decoding), and the payload is the rkyv archive of one [`Message`], laid out as if it
//! started at offset 0 (the decoder copies it into an aligned buffer).
//!
//! This module owns [`encode`] and the incremental [`FrameDecoder`] ([`state_chunk`]: the
//! same frames for executor state chunks, without copying their data). Invariants:
//!
//! - `L <= frame_bytes_max`: [`encode`] refuses larger messages, computing their size without
//!   holding more than the limit; the decoder rejects a larger prefix as soon as its four
//!   bytes are in, before reserving anything for the body.
//! - The decoder's body buffer grows with the bytes that actually arrived and never beyond
//!   the declared `L - 1`; once drained (after [`FrameDecoder::next_frame`] returned
//!   `Ok(None)` or an error) it holds at most `frame_bytes_max + FRAME_HEADER_BYTES`
//!   bytes ([`FrameDecoder::buffered_bytes`]).
//! - No payload is used before rkyv's checked access validated it, and the header kind must
//!   equal the payload's message kind.
//! - After an error the decoder is poisoned: it drops its buffers, ignores further input and
//!   returns that same error from every call (the caller closes the connection). Each error
//!   is counted once in [`WireCounters`].

use crate::error::{WireCounters, WireError};
use crate::message::{ArchivedMessage, Message, MessageKind};
use bytes::Bytes;
use rkyv::rancor;
use rkyv::ser::{Positional, Writer};
use rkyv::util::AlignedVec;
use std::sync::Arc;

pub mod state_chunk;

/// The length of the body (kind byte and payload) a frame header announces, refusing an
/// empty frame or one over `limits` before anything is reserved for it.
pub(crate) fn frame_body_len(
    header: [u8; FRAME_HEADER_BYTES],
    limits: &FrameLimits,
) -> Result<usize, WireError> {
    let [a, b, c, d, _] = header;
    let frame_bytes = u32::from_le_bytes([a, b, c, d]) as usize;
    if frame_bytes < 2 {
        return Err(WireError::EmptyFrame);
    }
    if frame_bytes > limits.frame_bytes_max {
        return Err(WireError::FrameTooLarge {
            frame_bytes: frame_bytes as u64,
            frame_bytes_max: limits.frame_bytes_max,
        });
    }
    Ok(frame_bytes - 1)
}

/// Bytes of the length prefix.
pub const FRAME_LEN_BYTES: usize = 4;
/// Bytes before the payload: the length prefix and the kind byte.
pub const FRAME_HEADER_BYTES: usize = FRAME_LEN_BYTES + 1;
/// Default largest `L` (kind byte plus payload): 64 MiB.
pub const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;

/// First reservation and smallest growth step of a frame buffer.
const GROW_MIN_BYTES: usize = 4 * 1024;
/// A body buffer larger than this is released after its frame instead of kept for reuse.
const BODY_RETAIN_BYTES: usize = 256 * 1024;

/// Limits a connection enforces on frames, sent and received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLimits {
    /// The largest `L` (kind byte plus payload) accepted; at most `u32::MAX`.
    pub frame_bytes_max: usize,
}

impl Default for FrameLimits {
    fn default() -> Self {
        Self {
            frame_bytes_max: FRAME_BYTES_MAX,
        }
    }
}

impl FrameLimits {
    /// Limits with `frame_bytes_max`, clamped to what a `u32` prefix can express.
    pub fn new(frame_bytes_max: usize) -> Self {
        Self {
            frame_bytes_max: frame_bytes_max.min(u32::MAX as usize),
        }
    }

    /// The largest payload a frame may carry.
    fn payload_bytes_max(&self) -> usize {
        self.frame_bytes_max
            .min(u32::MAX as usize)
            .saturating_sub(1)
    }
}

/// Encodes `message` as one frame under the default [`FrameLimits`].
pub fn encode(message: &Message) -> Result<Bytes, WireError> {
    encode_with(message, &FrameLimits::default())
}

/// Encodes `message` as one frame, or refuses it with [`WireError::FrameTooLarge`] (without
/// ever holding more than the limit) when its frame would exceed `limits`.
pub fn encode_with(message: &Message, limits: &FrameLimits) -> Result<Bytes, WireError> {
    let mut writer = FrameWriter::new(limits.payload_bytes_max(), message.payload_size_hint());
    rkyv::api::high::to_bytes_in::<_, rancor::Error>(message, &mut writer)
        .map_err(|e| WireError::Encode(e.to_string()))?;
    let frame_bytes = writer.payload_pos as u64 + 1;
    let too_large = WireError::FrameTooLarge {
        frame_bytes,
        frame_bytes_max: limits.frame_bytes_max,
    };
    if writer.overflowed {
        return Err(too_large);
    }
    let len = u32::try_from(frame_bytes).map_err(|_| too_large)?;
    let mut buf = writer.buf;
    let [a, b, c, d] = len.to_le_bytes();
    if let Some(header) = buf.get_mut(..FRAME_HEADER_BYTES) {
        header.copy_from_slice(&[a, b, c, d, message.kind().as_u8()]);
    }
    Ok(Bytes::from(buf))
}

/// Decodes exactly one complete frame (tests, tools). Incomplete input is
/// [`WireError::Truncated`]; bytes after the frame are [`WireError::Invalid`].
pub fn decode_frame(frame: &[u8], limits: &FrameLimits) -> Result<Message, WireError> {
    let mut decoder = FrameDecoder::new(*limits);
    decoder.push(frame);
    match decoder.next_frame()? {
        None => {
            decoder.finish()?;
            Err(WireError::Truncated)
        }
        Some(message) => {
            if decoder.error().is_some() || decoder.buffered_input_bytes() > 0 {
                return Err(WireError::Invalid("bytes after the frame".to_string()));
            }
            Ok(message)
        }
    }
}

/// An rkyv writer that lays the payload out after a reserved header and, once the payload
/// passes its limit, stops storing bytes but keeps counting them (so the refusal can say how
/// large the frame would have been). Positions are relative to the payload's start.
struct FrameWriter {
    buf: Vec<u8>,
    payload_pos: usize,
    payload_max: usize,
    overflowed: bool,
}

impl FrameWriter {
    fn new(payload_max: usize, payload_hint: usize) -> Self {
        let mut buf = Vec::with_capacity(FRAME_HEADER_BYTES + payload_max.min(payload_hint));
        buf.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
        Self {
            buf,
            payload_pos: 0,
            payload_max,
            overflowed: false,
        }
    }
}

impl Positional for FrameWriter {
    fn pos(&self) -> usize {
        self.payload_pos
    }
}

impl<E> Writer<E> for FrameWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<(), E> {
        let end = self.payload_pos.saturating_add(bytes.len());
        if !self.overflowed && end <= self.payload_max {
            reserve_capped(
                &mut self.buf,
                bytes.len(),
                FRAME_HEADER_BYTES + self.payload_max,
            );
            self.buf.extend_from_slice(bytes);
        } else if !self.overflowed {
            self.overflowed = true;
            self.buf = Vec::new();
        }
        self.payload_pos = end;
        Ok(())
    }
}

/// Reserves room for `additional` more bytes, doubling but never past `cap_max` (the caller
/// guarantees `len + additional <= cap_max`).
fn reserve_capped(buf: &mut Vec<u8>, additional: usize, cap_max: usize) {
    let needed = buf.len().saturating_add(additional);
    if needed > buf.capacity() {
        let target = needed
            .max(buf.capacity().saturating_mul(2))
            .max(GROW_MIN_BYTES)
            .min(cap_max.max(needed));
        buf.reserve_exact(target - buf.len());
    }
}

/// Incremental, bounded, validating frame decoder for one stream.
///
/// Use: [`push`](Self::push) each chunk read from the stream, then call
/// [`next_frame`](Self::next_frame) until it returns `Ok(None)`; at the end of the stream
/// call [`finish`](Self::finish). Any error poisons the decoder: close the connection.
///
/// Memory: the body buffer holds at most the current frame's declared payload and grows
/// only as its bytes arrive (at most eight times what arrived, never past the declared
/// payload). Bytes pushed past the end of a complete frame wait in a side
/// buffer until `next_frame` takes the frame, so a caller that drains after every push
/// holds at most `frame_bytes_max + FRAME_HEADER_BYTES` between pushes.
#[derive(Debug)]
pub struct FrameDecoder {
    limits: FrameLimits,
    counters: Arc<WireCounters>,
    header: [u8; FRAME_HEADER_BYTES],
    header_len: usize,
    /// Payload bytes the current frame declares (`L - 1`), known once the prefix is in.
    body_len: usize,
    body: AlignedVec,
    /// Bytes pushed past the end of a complete frame, not yet fed; `pending_pos..` unread.
    pending: Vec<u8>,
    pending_pos: usize,
    poisoned: Option<WireError>,
}

impl FrameDecoder {
    /// A decoder with its own counters.
    pub fn new(limits: FrameLimits) -> Self {
        Self::with_counters(limits, Arc::new(WireCounters::new()))
    }

    /// A decoder that records into shared counters (one set per node).
    pub fn with_counters(limits: FrameLimits, counters: Arc<WireCounters>) -> Self {
        Self {
            limits,
            counters,
            header: [0; FRAME_HEADER_BYTES],
            header_len: 0,
            body_len: 0,
            body: AlignedVec::new(),
            pending: Vec::new(),
            pending_pos: 0,
            poisoned: None,
        }
    }

    pub fn limits(&self) -> FrameLimits {
        self.limits
    }

    pub fn counters(&self) -> &Arc<WireCounters> {
        &self.counters
    }

    /// The error that poisoned this decoder, if any.
    pub fn error(&self) -> Option<&WireError> {
        self.poisoned.as_ref()
    }

    /// Bytes held or reserved for frame data: header bytes in, the body buffer's capacity,
    /// and the side buffer's capacity.
    pub fn buffered_bytes(&self) -> usize {
        self.header_len + self.body.capacity() + self.pending.capacity()
    }

    /// Input bytes received and not yet returned as a message.
    pub fn buffered_input_bytes(&self) -> usize {
        self.header_len + self.body.len() + self.pending.len().saturating_sub(self.pending_pos)
    }

    /// Takes the next chunk of the stream. The length prefix and kind byte are checked as
    /// soon as they arrive; an error is kept and returned by the next call to
    /// [`next_frame`](Self::next_frame). Input after an error is dropped.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.poisoned.is_some() || chunk.is_empty() {
            return;
        }
        if self.pending_pos < self.pending.len() {
            self.pending.extend_from_slice(chunk);
            return;
        }
        let used = self.feed(chunk);
        if self.poisoned.is_none() {
            if let Some(rest) = chunk.get(used..).filter(|rest| !rest.is_empty()) {
                self.pending = rest.to_vec();
                self.pending_pos = 0;
            }
        }
    }

    /// The next complete message, `Ok(None)` if more input is needed, or the error that
    /// poisoned the decoder (the same one on every later call).
    pub fn next_frame(&mut self) -> Result<Option<Message>, WireError> {
        self.next_with(|archived| {
            rkyv::deserialize::<Message, rancor::Error>(archived)
                .map_err(|e| WireError::Invalid(e.to_string()))
        })
    }

    /// Like [`next_frame`](Self::next_frame), but hands the validated archive to `read`
    /// instead of deserializing it (zero-copy reads of large payloads; `read` may copy out
    /// what it keeps). Same checks, counts and poisoning.
    pub fn next_frame_archived<R>(
        &mut self,
        read: impl FnOnce(&ArchivedMessage) -> R,
    ) -> Result<Option<R>, WireError> {
        self.next_with(|archived| Ok(read(archived)))
    }

    fn next_with<R>(
        &mut self,
        read: impl FnOnce(&ArchivedMessage) -> Result<R, WireError>,
    ) -> Result<Option<R>, WireError> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        self.feed_pending();
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        if !self.frame_complete() {
            return Ok(None);
        }
        let decoded = self
            .access_body()
            .and_then(|archived| Ok((archived.kind(), read(archived)?)));
        let payload_bytes = self.body_len;
        self.reset_frame();
        match decoded {
            Ok((kind, value)) => {
                self.counters.record_frame(kind, payload_bytes);
                // Check the next frame's header now, so a bad one is refused promptly.
                self.feed_pending();
                Ok(Some(value))
            }
            Err(e) => {
                self.poison(e.clone());
                Err(e)
            }
        }
    }

    /// The stream ended. Call after [`next_frame`](Self::next_frame) returned `Ok(None)`:
    /// any byte still buffered belongs to an unfinished frame, [`WireError::Truncated`].
    pub fn finish(&mut self) -> Result<(), WireError> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        if self.buffered_input_bytes() > 0 {
            self.poison(WireError::Truncated);
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    fn frame_complete(&self) -> bool {
        self.header_len == FRAME_HEADER_BYTES && self.body.len() == self.body_len
    }

    /// Moves bytes of `data` into the current frame, checking the header as it completes;
    /// stops at the end of the frame or at an error. Returns the bytes used.
    fn feed(&mut self, data: &[u8]) -> usize {
        let mut rest = data;
        while self.header_len < FRAME_HEADER_BYTES {
            let Some((byte, tail)) = rest.split_first() else {
                return data.len();
            };
            if let Some(slot) = self.header.get_mut(self.header_len) {
                *slot = *byte;
            }
            self.header_len += 1;
            rest = tail;
            let checked = match self.header_len {
                FRAME_LEN_BYTES => self.check_len(),
                FRAME_HEADER_BYTES => self.check_kind(),
                _ => Ok(()),
            };
            if let Err(e) = checked {
                self.poison(e);
                return data.len() - rest.len();
            }
        }
        let take = (self.body_len - self.body.len()).min(rest.len());
        if let Some(bytes) = rest.get(..take) {
            self.grow_body(take);
            self.body.extend_from_slice(bytes);
        }
        data.len() - rest.len() + take
    }

    /// The length prefix is in: refuse an empty or oversized frame before any reservation.
    fn check_len(&mut self) -> Result<(), WireError> {
        self.body_len = frame_body_len(self.header, &self.limits)?;
        Ok(())
    }

    fn check_kind(&self) -> Result<(), WireError> {
        let [.., kind] = self.header;
        match MessageKind::from_u8(kind) {
            Some(_) => Ok(()),
            None => Err(WireError::UnknownKind(kind)),
        }
    }

    /// Makes room for `additional` body bytes: doubling, never past the declared body.
    fn grow_body(&mut self, additional: usize) {
        let needed = self.body.len() + additional;
        if needed > self.body.capacity() {
            // Doubling keeps what an unfinished frame holds within twice what the peer sent;
            // once an eighth of the frame is in, take the rest at once and skip the copies.
            let whole = if needed >= self.body_len / 8 {
                self.body_len
            } else {
                0
            };
            let target = needed
                .max(self.body.capacity().saturating_mul(2))
                .max(GROW_MIN_BYTES)
                .max(whole)
                .min(self.body_len);
            self.body.reserve_exact(target - self.body.len());
        }
    }

    /// Validates the complete payload and checks its kind against the header.
    fn access_body(&self) -> Result<&ArchivedMessage, WireError> {
        let [.., header_kind] = self.header;
        let archived = rkyv::access::<ArchivedMessage, rancor::Error>(self.body.as_slice())
            .map_err(|e| WireError::Invalid(e.to_string()))?;
        let payload_kind = archived.kind().as_u8();
        if payload_kind != header_kind {
            return Err(WireError::KindMismatch {
                header: header_kind,
                payload: payload_kind,
            });
        }
        Ok(archived)
    }

    fn reset_frame(&mut self) {
        self.header_len = 0;
        self.body_len = 0;
        if self.body.capacity() > BODY_RETAIN_BYTES {
            self.body = AlignedVec::new();
        } else {
            self.body.clear();
        }
    }

    fn feed_pending(&mut self) {
        if self.pending_pos >= self.pending.len() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let unread = pending.get(self.pending_pos..).unwrap_or_default();
        let used = self.feed(unread);
        if self.poisoned.is_some() {
            return;
        }
        if used < unread.len() {
            self.pending_pos += used;
            self.pending = pending;
        } else {
            self.pending_pos = 0;
        }
    }

    fn poison(&mut self, error: WireError) {
        self.counters.record_error(&error);
        self.poisoned = Some(error);
        self.header_len = 0;
        self.body_len = 0;
        self.body = AlignedVec::new();
        self.pending = Vec::new();
        self.pending_pos = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ArchivedMessage, Hello, NodeRole, ParamKeyWire, RowWire};

    fn sample() -> Message {
        Message::Apply {
            request_id: 7,
            server: 1,
            node_id: 2,
            flush_id: 3,
            staged: false,
            held_from: 2,
            forwarded: false,
            updates: vec![
                (
                    ParamKeyWire { table: 1, row: 9 },
                    RowWire::F32(vec![1.0, -2.5]),
                ),
                (
                    ParamKeyWire { table: 2, row: 4 },
                    RowWire::I64(vec![3, 4, 5]),
                ),
            ],
        }
    }

    fn hello() -> Message {
        Message::Hello(Hello {
            protocol_version: 1,
            job_id: [7; 16],
            node_id: 3,
            role: NodeRole {
                worker: true,
                server: false,
                master: false,
            },
            listen_addr: "127.0.0.1:4000".into(),
        })
    }

    fn header(len: u32, kind: u8) -> Vec<u8> {
        let mut h = len.to_le_bytes().to_vec();
        h.push(kind);
        h
    }

    #[test]
    fn frame_layout_is_length_kind_payload() {
        let frame = encode(&sample()).unwrap();
        let len = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - FRAME_LEN_BYTES);
        assert_eq!(frame[4], MessageKind::Apply.as_u8());
        assert_eq!(
            decode_frame(&frame, &FrameLimits::default()).unwrap(),
            sample()
        );
    }

    #[test]
    fn split_at_every_byte_boundary() {
        let mut stream = encode(&sample()).unwrap().to_vec();
        stream.extend_from_slice(&encode(&hello()).unwrap());
        for cut in 0..=stream.len() {
            let mut d = FrameDecoder::new(FrameLimits::default());
            let mut got = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                d.push(part);
                while let Some(m) = d.next_frame().unwrap() {
                    got.push(m);
                }
            }
            d.finish().unwrap();
            assert_eq!(got, vec![sample(), hello()], "cut at {cut}");
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let stream = encode(&sample()).unwrap();
        let mut d = FrameDecoder::new(FrameLimits::default());
        let mut got = Vec::new();
        for b in stream.iter() {
            d.push(&[*b]);
            while let Some(m) = d.next_frame().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, vec![sample()]);
        assert_eq!(d.counters().snapshot().frames_decoded, 1);
    }

    #[test]
    fn oversized_prefix_is_refused_before_any_body_allocation() {
        let limits = FrameLimits::new(1024);
        let mut d = FrameDecoder::new(limits);
        let mut bytes = header(1025, MessageKind::Get.as_u8());
        bytes.extend_from_slice(&[0; 512]);
        d.push(&bytes[..4]);
        assert!(d.buffered_bytes() <= FRAME_HEADER_BYTES);
        let err = d.next_frame().unwrap_err();
        assert_eq!(
            err,
            WireError::FrameTooLarge {
                frame_bytes: 1025,
                frame_bytes_max: 1024
            }
        );
        d.push(&bytes[4..]);
        assert_eq!(d.buffered_bytes(), 0);
        assert_eq!(d.next_frame().unwrap_err(), err);
        assert_eq!(d.counters().snapshot().frame_too_large, 1);
    }

    #[test]
    fn huge_prefix_under_the_limit_allocates_only_what_arrived() {
        let mut d = FrameDecoder::new(FrameLimits::default());
        let mut bytes = header((FRAME_BYTES_MAX - 1) as u32, MessageKind::Rows.as_u8());
        bytes.extend_from_slice(&[0; 100]);
        d.push(&bytes);
        assert_eq!(d.next_frame().unwrap(), None);
        assert!(d.buffered_bytes() <= FRAME_HEADER_BYTES + GROW_MIN_BYTES);
        assert_eq!(d.finish().unwrap_err(), WireError::Truncated);
        assert_eq!(d.counters().snapshot().truncated, 1);
    }

    #[test]
    fn truncated_frame_is_reported_at_finish() {
        let frame = encode(&hello()).unwrap();
        for cut in 1..frame.len() {
            let mut d = FrameDecoder::new(FrameLimits::default());
            d.push(&frame[..cut]);
            assert_eq!(d.next_frame().unwrap(), None);
            assert_eq!(d.finish().unwrap_err(), WireError::Truncated);
            assert_eq!(d.next_frame().unwrap_err(), WireError::Truncated);
        }
        let mut d = FrameDecoder::new(FrameLimits::default());
        d.finish().unwrap();
    }

    #[test]
    fn unknown_and_zero_kinds_are_refused_at_the_header() {
        for kind in [0u8, MessageKind::COUNT as u8 + 1, 200, 255] {
            let mut d = FrameDecoder::new(FrameLimits::default());
            d.push(&header(100, kind));
            assert_eq!(d.next_frame().unwrap_err(), WireError::UnknownKind(kind));
            assert_eq!(d.buffered_bytes(), 0);
        }
    }

    #[test]
    fn empty_frames_are_refused() {
        for len in [0u32, 1] {
            let mut d = FrameDecoder::new(FrameLimits::default());
            d.push(&header(len, 1));
            assert_eq!(d.next_frame().unwrap_err(), WireError::EmptyFrame);
            assert_eq!(d.counters().snapshot().empty_frame, 1);
        }
    }

    #[test]
    fn header_kind_must_match_the_payload() {
        let mut frame = encode(&hello()).unwrap().to_vec();
        frame[4] = MessageKind::Welcome.as_u8();
        let err = decode_frame(&frame, &FrameLimits::default()).unwrap_err();
        assert_eq!(
            err,
            WireError::KindMismatch {
                header: MessageKind::Welcome.as_u8(),
                payload: MessageKind::Hello.as_u8()
            }
        );
    }

    #[test]
    fn garbage_payload_is_invalid_and_poisons() {
        let mut frame = header(33, MessageKind::Get.as_u8());
        frame.extend_from_slice(&[0xAB; 32]);
        let mut d = FrameDecoder::new(FrameLimits::default());
        d.push(&frame);
        d.push(&encode(&hello()).unwrap());
        let err = d.next_frame().unwrap_err();
        assert!(matches!(err, WireError::Invalid(_)), "{err:?}");
        assert_eq!(d.next_frame().unwrap_err(), err);
        assert_eq!(d.finish().unwrap_err(), err);
        let s = d.counters().snapshot();
        assert_eq!((s.invalid, s.rejections(), s.frames_decoded), (1, 1, 0));
    }

    #[test]
    fn encode_refuses_messages_over_the_limit_and_reports_their_size() {
        let big = Message::Failed {
            message: "x".repeat(10_000),
            unreachable_server: None,
        };
        let full = encode(&big).unwrap();
        let limits = FrameLimits::new(1000);
        let err = encode_with(&big, &limits).unwrap_err();
        assert_eq!(
            err,
            WireError::FrameTooLarge {
                frame_bytes: (full.len() - FRAME_LEN_BYTES) as u64,
                frame_bytes_max: 1000
            }
        );
        let exact = FrameLimits::new(full.len() - FRAME_LEN_BYTES);
        assert_eq!(encode_with(&big, &exact).unwrap(), full);
        // A decoder with a smaller limit refuses what a larger one sent.
        assert!(matches!(
            decode_frame(&full, &limits),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn many_frames_in_one_chunk_are_all_returned_and_side_buffer_is_freed() {
        let mut stream = Vec::new();
        for _ in 0..100 {
            stream.extend_from_slice(&encode(&hello()).unwrap());
        }
        let mut d = FrameDecoder::new(FrameLimits::default());
        d.push(&stream);
        let mut n = 0;
        while d.next_frame().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 100);
        assert_eq!(d.buffered_input_bytes(), 0);
        assert!(d.buffered_bytes() <= GROW_MIN_BYTES);
        d.finish().unwrap();
        assert_eq!(d.counters().snapshot().frames_of(MessageKind::Hello), 100);
    }

    #[test]
    fn archived_reads_are_validated_and_counted_like_decoded_ones() {
        let beat = Message::Heartbeat {
            node_id: 4,
            lease_seq: 99,
        };
        let mut stream = encode(&beat).unwrap().to_vec();
        stream.extend_from_slice(&header(40, MessageKind::Heartbeat.as_u8()));
        stream.extend_from_slice(&[0xEE; 39]);
        let mut d = FrameDecoder::new(FrameLimits::default());
        d.push(&stream);
        let got = d.next_frame_archived(|m| match m {
            ArchivedMessage::Heartbeat { node_id, lease_seq } => {
                Some((node_id.to_native(), lease_seq.to_native()))
            }
            _ => None,
        });
        assert_eq!(got, Ok(Some(Some((4, 99)))));
        let err = d.next_frame_archived(|_| ()).unwrap_err();
        assert!(matches!(err, WireError::Invalid(_)), "{err:?}");
        let s = d.counters().snapshot();
        assert_eq!((s.frames_of(MessageKind::Heartbeat), s.invalid), (1, 1));
    }

    #[test]
    fn decode_frame_refuses_trailing_bytes() {
        let mut frame = encode(&hello()).unwrap().to_vec();
        frame.push(0);
        assert!(matches!(
            decode_frame(&frame, &FrameLimits::default()),
            Err(WireError::Invalid(_))
        ));
    }
}
