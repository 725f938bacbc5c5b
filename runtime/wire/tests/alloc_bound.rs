//! No allocation beyond the frame limit, ever: a counting global allocator records the
//! largest single allocation while hostile and near-limit inputs go through the decoder and
//! while an oversized message is refused by the encoder.
//!
//! This binary holds one test only, so nothing else allocates while it measures.

use harp_wire::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;

static TRACKING: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if TRACKING.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if TRACKING.load(Ordering::Relaxed) {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The largest single allocation made while `f` runs.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.store(0, Ordering::Relaxed);
    TRACKING.store(true, Ordering::Relaxed);
    f();
    TRACKING.store(false, Ordering::Relaxed);
    LARGEST.load(Ordering::Relaxed)
}

fn header(len: u32, kind: MessageKind) -> Vec<u8> {
    let mut h = len.to_le_bytes().to_vec();
    h.push(kind.as_u8());
    h
}

#[test]
fn nothing_allocates_past_the_frame_limit() {
    const LIMIT: usize = 1 << 20;
    let limits = FrameLimits::new(LIMIT);

    // Oversized prefixes, from just over the limit to u32::MAX, followed by a body.
    let body = vec![0x5Au8; 256 * 1024];
    for len in [LIMIT as u32 + 1, 1 << 24, u32::MAX] {
        let largest = largest_allocation(|| {
            let mut d = FrameDecoder::new(limits);
            d.push(&header(len, MessageKind::DumpRows));
            d.push(&body);
            assert!(matches!(
                d.next_frame(),
                Err(WireError::FrameTooLarge { .. })
            ));
            assert_eq!(d.buffered_bytes(), 0);
        });
        assert!(
            largest < 4096,
            "prefix {len}: an allocation of {largest} bytes"
        );
    }

    // A frame at the limit that never completes: only what arrived is held.
    let largest = largest_allocation(|| {
        let mut d = FrameDecoder::new(limits);
        d.push(&header(LIMIT as u32, MessageKind::DumpRows));
        d.push(&body[..1000]);
        assert_eq!(d.next_frame(), Ok(None));
        assert_eq!(d.finish(), Err(WireError::Truncated));
    });
    assert!(
        largest <= 8192,
        "an allocation of {largest} bytes for 1000 bytes in"
    );

    // A complete frame at the limit with a garbage payload, and a valid one near the limit:
    // the body buffer and the deserialized rows each stay within the limit.
    let mut garbage = header(LIMIT as u32, MessageKind::DumpRows);
    garbage.resize(FRAME_LEN_BYTES + LIMIT, 0xFF);
    let rows = (LIMIT - 1024) / 4;
    let valid = encode_with(
        &Message::DumpRows {
            request_id: 1,
            rows: vec![(
                ParamKeyWire { table: 1, row: 2 },
                RowWire::F32(vec![1.0; rows]),
            )],
            part: 0,
            parts: 1,
        },
        &limits,
    )
    .unwrap();
    let largest = largest_allocation(|| {
        assert!(matches!(
            decode_frame(&garbage, &limits),
            Err(WireError::Invalid(_))
        ));
        for chunk in [usize::MAX, 65536, 1500] {
            let mut d = FrameDecoder::new(limits);
            for part in valid.chunks(chunk.min(valid.len())) {
                d.push(part);
                while let Some(m) = d.next_frame().unwrap() {
                    assert_eq!(m.kind(), MessageKind::DumpRows);
                }
            }
            d.finish().unwrap();
        }
    });
    assert!(
        largest <= LIMIT,
        "an allocation of {largest} bytes with a limit of {LIMIT}"
    );

    // Encoding a message ten times the limit is refused without holding it.
    let huge = Message::DumpRows {
        request_id: 2,
        rows: vec![(
            ParamKeyWire { table: 1, row: 2 },
            RowWire::I64(vec![7; 10 * LIMIT / 8]),
        )],
        part: 0,
        parts: 1,
    };
    let largest = largest_allocation(|| {
        let err = encode_with(&huge, &limits).unwrap_err();
        assert!(
            matches!(err, WireError::FrameTooLarge { frame_bytes, .. } if frame_bytes > 10 * LIMIT as u64)
        );
    });
    assert!(
        largest <= LIMIT + FRAME_HEADER_BYTES,
        "encode allocated {largest} bytes"
    );
}
