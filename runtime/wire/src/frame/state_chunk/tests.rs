use super::*;
use crate::frame::{decode_frame, encode, encode_with, FRAME_BYTES_MAX};

fn chunk(request_id: u64, total: u64, offset: u64, data: Vec<u8>) -> Message {
    Message::StateChunk {
        request_id,
        total,
        offset,
        data,
    }
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn frame_of(frame: StateChunkFrame) -> Vec<u8> {
    frame.into_parts().concat()
}

fn reader() -> StateChunkReader {
    StateChunkReader::new(FrameLimits::default(), Arc::new(WireCounters::new()))
}

/// Reads `stream` cut into pieces at `cuts`.
fn read(stream: &[u8], cuts: &[usize]) -> Result<ReceivedStateChunk, WireError> {
    let mut r = reader();
    let mut at = 0;
    for &cut in cuts.iter().chain([stream.len()].iter()) {
        let cut = cut.clamp(at, stream.len());
        r.push(Bytes::copy_from_slice(&stream[at..cut]))?;
        at = cut;
    }
    r.finish()
}

const LENGTHS: [usize; 13] = [0, 1, 7, 8, 9, 15, 16, 17, 100, 1000, 4096, 65_537, 8 << 20];

#[test]
fn the_frame_is_the_generic_encoding_byte_for_byte() {
    for len in LENGTHS.into_iter().chain([(8 << 20) + 3]) {
        for (request_id, total, offset) in [(0, 0, 0), (7, 1 << 40, 8 << 20), (u64::MAX, 3, 9)] {
            let data = bytes(len, 5);
            let ours = encode_state_chunk(
                request_id,
                total,
                offset,
                Bytes::from(data.clone()),
                &FrameLimits::default(),
            )
            .unwrap();
            assert_eq!(ours.data.len(), len, "the data part is the data");
            let generic = encode(&chunk(request_id, total, offset, data)).unwrap();
            assert_eq!(ours.len(), generic.len(), "len {len}");
            assert!(frame_of(ours) == generic[..], "len {len}: bytes differ");
        }
    }
}

#[test]
fn the_generic_decoder_reads_what_the_encoder_writes() {
    for len in LENGTHS {
        let data = bytes(len, 9);
        let frame = encode_state_chunk(
            4,
            99,
            16,
            Bytes::from(data.clone()),
            &FrameLimits::default(),
        )
        .unwrap();
        let decoded = decode_frame(&frame_of(frame), &FrameLimits::default()).unwrap();
        assert!(decoded == chunk(4, 99, 16, data), "len {len}");
    }
}

#[test]
fn the_reader_reads_generic_frames_in_any_pieces() {
    for len in LENGTHS {
        let data = bytes(len, 1);
        let stream = encode(&chunk(3, 1 << 30, 24 << 20, data.clone())).unwrap();
        let n = stream.len();
        for cuts in [
            vec![],
            vec![1],
            vec![4],
            vec![5],
            vec![6, 7, 8],
            vec![n / 3, n / 2, n - 9],
            vec![n - 1],
            (1..n).step_by(n / 7 + 1).collect(),
        ] {
            let got = read(&stream, &cuts).unwrap();
            assert_eq!(
                (got.request_id, got.total, got.offset, got.len()),
                (3, 1 << 30, 24 << 20, len)
            );
            let mut out = vec![0u8; len];
            assert!(got.copy_to(&mut out));
            assert!(out == data, "len {len}, cuts {cuts:?}");
            assert!(
                !got.copy_to(&mut vec![0u8; len + 1]),
                "a wrong-sized target"
            );
        }
    }
}

#[test]
fn the_reader_keeps_the_pieces_instead_of_copying_them() {
    let data = Bytes::from(bytes(100_000, 2));
    let frame = encode_state_chunk(1, 100_000, 0, data.clone(), &FrameLimits::default()).unwrap();
    let mut r = reader();
    for part in frame.into_parts() {
        r.push(part).unwrap();
    }
    let got = r.finish().unwrap();
    let pieces: Vec<&[u8]> = got.pieces().collect();
    assert_eq!(pieces.len(), 1);
    assert_eq!(pieces[0].as_ptr(), data.as_ptr(), "the data was not copied");
}

#[test]
fn frames_are_counted_once_read() {
    let counters = Arc::new(WireCounters::new());
    let mut r = StateChunkReader::new(FrameLimits::default(), counters.clone());
    let stream = encode(&chunk(1, 2, 0, vec![7; 10])).unwrap();
    r.push(stream.clone()).unwrap();
    r.finish().unwrap();
    let s = counters.snapshot();
    assert_eq!(s.frames_of(MessageKind::StateChunk), 1);
    assert_eq!(
        s.payload_bytes_decoded as usize,
        stream.len() - FRAME_HEADER_BYTES
    );
    assert_eq!(s.rejections(), 0);
}

#[test]
fn the_encoder_refuses_a_frame_over_the_limit_like_the_generic_one() {
    let data = bytes(1000, 0);
    let limits = FrameLimits::new(500);
    let ours = encode_state_chunk(1, 1000, 0, Bytes::from(data.clone()), &limits).unwrap_err();
    let generic = encode_with(&chunk(1, 1000, 0, data), &limits).unwrap_err();
    assert_eq!(ours, generic);
    assert!(matches!(ours, WireError::FrameTooLarge { .. }));
}

/// Reads `stream` in one piece and says what went wrong; checks it was counted once.
fn refusal(stream: &[u8]) -> WireError {
    let counters = Arc::new(WireCounters::new());
    let mut r = StateChunkReader::new(FrameLimits::default(), counters.clone());
    let e = match r.push(Bytes::copy_from_slice(stream)) {
        Err(e) => e,
        Ok(()) => r.finish().unwrap_err(),
    };
    let s = counters.snapshot();
    assert_eq!((s.rejections(), s.frames_decoded), (1, 0), "{e}");
    e
}

/// What a refusal must be.
type Expected = fn(&WireError) -> bool;

#[test]
fn malformed_frames_are_refused() {
    // 13 data bytes: 3 bytes of padding before the root.
    let good = encode(&chunk(5, 13, 0, bytes(13, 3))).unwrap().to_vec();
    let data_field = layout().unwrap().data_field;
    let root_at = FRAME_HEADER_BYTES + padded_len(13);
    assert_eq!(root_at + ROOT_BYTES, good.len());
    let edit = |at: usize, byte: u8| {
        let mut f = good.clone();
        f[at] = byte;
        f
    };
    let with_len = |len: u32| {
        let mut f = good.clone();
        f[..4].copy_from_slice(&len.to_le_bytes());
        f
    };
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 8]);
    let mut declared_longer = longer.clone();
    declared_longer[..4].copy_from_slice(&((longer.len() - 4) as u32).to_le_bytes());
    let mut data_len_off = good.clone();
    // (14 would be a well-formed chunk whose last byte is the first padding byte.)
    data_len_off[root_at + data_field + 4] = 21;
    let mut pointer_off = good.clone();
    pointer_off[root_at + data_field] ^= 8;
    let hello = encode(&Message::Heartbeat {
        node_id: 1,
        lease_seq: 2,
    })
    .unwrap();
    let cases: Vec<(&str, Vec<u8>, Expected)> = vec![
        ("padding", edit(FRAME_HEADER_BYTES + 13, 1), |e| {
            matches!(e, WireError::Invalid(_))
        }),
        ("pointer", pointer_off, |e| {
            matches!(e, WireError::Invalid(_))
        }),
        ("data length", data_len_off, |e| {
            matches!(e, WireError::Invalid(_))
        }),
        ("root padding", edit(good.len() - 1, 0xFF), |e| {
            matches!(e, WireError::Invalid(_))
        }),
        ("tag", edit(root_at, 0), |e| {
            matches!(e, WireError::Invalid(_) | WireError::KindMismatch { .. })
        }),
        ("extra payload", declared_longer, |e| {
            matches!(e, WireError::Invalid(_))
        }),
        ("bytes past the frame", longer, |e| {
            matches!(e, WireError::Invalid(_))
        }),
        ("truncated", good[..good.len() - 1].to_vec(), |e| {
            *e == WireError::Truncated
        }),
        ("header only", good[..3].to_vec(), |e| {
            *e == WireError::Truncated
        }),
        ("nothing", vec![], |e| matches!(e, WireError::Invalid(_))),
        ("another kind", hello.to_vec(), |e| {
            matches!(e, WireError::Invalid(_))
        }),
        ("unknown kind", edit(4, 0), |e| {
            *e == WireError::UnknownKind(0)
        }),
        ("empty frame", with_len(1), |e| *e == WireError::EmptyFrame),
        ("too large", with_len(FRAME_BYTES_MAX as u32 + 1), |e| {
            matches!(e, WireError::FrameTooLarge { .. })
        }),
        ("shorter than a root", with_len(9)[..14].to_vec(), |e| {
            matches!(e, WireError::Invalid(_))
        }),
    ];
    for (what, stream, expected) in cases {
        let e = refusal(&stream);
        assert!(expected(&e), "{what}: {e:?}");
    }
}

#[test]
fn a_refused_reader_stays_refused_and_holds_nothing() {
    let mut r = reader();
    let mut header = 100u32.to_le_bytes().to_vec();
    header.push(MessageKind::Hello.as_u8());
    let e = r.push(Bytes::from(header)).unwrap_err();
    assert_eq!(r.push(Bytes::from_static(&[0; 99])).unwrap_err(), e);
    assert!(r.pieces.is_empty());
    assert_eq!(r.finish().unwrap_err(), e);
}

#[test]
fn an_oversized_prefix_is_refused_before_the_body_arrives() {
    let mut r = StateChunkReader::new(FrameLimits::new(64), Arc::new(WireCounters::new()));
    let mut header = 65u32.to_le_bytes().to_vec();
    header.push(MessageKind::StateChunk.as_u8());
    assert!(matches!(
        r.push(Bytes::from(header)),
        Err(WireError::FrameTooLarge {
            frame_bytes: 65,
            ..
        })
    ));
}
