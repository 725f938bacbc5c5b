//! Fuzz property: at least 1,000,000 random and mutated frames through the decoder.
//!
//! Inputs: random bytes; valid frames unchanged, with random byte flips (anywhere or in the
//! payload), truncated, extended, with a changed length prefix or kind byte, and
//! concatenations, fed whole or in random chunks, under the default limit or a small random
//! one. For every input: no panic; each call yields a message, `None`, or a typed error that
//! then repeats; unchanged frames decode to their message; after each drain the decoder holds
//! at most `frame_bytes_max + FRAME_HEADER_BYTES`; every rejection is counted once.
//!
//! `HARP_WIRE_FUZZ_FRAMES` sets the number of inputs (default 1,000,000) and
//! `HARP_WIRE_FUZZ_SEED` the seed (printed, so a failure replays).

mod common;

use common::{arb_message, same};
use harp_wire::*;
use proptest::strategy::{Strategy, ValueTree};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Instant;

const FRAMES_DEFAULT: u64 = 1_000_000;
const SEED_DEFAULT: u64 = 0x4841_5250_5749_5245;
const THREADS: u64 = 2;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be an unsigned integer, got {v:?}")),
        Err(_) => default,
    }
}

struct Corpus {
    messages: Vec<Message>,
    frames: Vec<Vec<u8>>,
}

fn corpus() -> Corpus {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = arb_message();
    let mut messages: Vec<Message> = (0..400)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    // A few large ones, so lowered limits and long bodies are exercised.
    messages.push(Message::Rows {
        request_id: 1,
        rows: RowsResult::Ok(vec![
            RowWire::F32(vec![0.25; 3000]),
            RowWire::I64(vec![-1; 500]),
        ]),
        part: 0,
        parts: 1,
    });
    messages.push(Message::Failed {
        message: "é".repeat(2000),
        unreachable_server: Some(3),
    });
    let frames = messages
        .iter()
        .map(|m| encode(m).unwrap().to_vec())
        .collect();
    Corpus { messages, frames }
}

#[derive(Default, Debug)]
struct Tally {
    inputs: u64,
    messages: u64,
    clean_ok: u64,
    too_large: u64,
    truncated: u64,
    unknown_kind: u64,
    kind_mismatch: u64,
    invalid: u64,
    empty: u64,
    other: u64,
    max_buffered_after_drain: usize,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.inputs += o.inputs;
        self.messages += o.messages;
        self.clean_ok += o.clean_ok;
        self.too_large += o.too_large;
        self.truncated += o.truncated;
        self.unknown_kind += o.unknown_kind;
        self.kind_mismatch += o.kind_mismatch;
        self.invalid += o.invalid;
        self.empty += o.empty;
        self.other += o.other;
        self.max_buffered_after_drain = self
            .max_buffered_after_drain
            .max(o.max_buffered_after_drain);
    }

    fn errors(&self) -> u64 {
        self.too_large
            + self.truncated
            + self.unknown_kind
            + self.kind_mismatch
            + self.invalid
            + self.empty
            + self.other
    }

    fn count(&mut self, e: &WireError) {
        match e {
            WireError::FrameTooLarge { .. } => self.too_large += 1,
            WireError::Truncated => self.truncated += 1,
            WireError::UnknownKind(_) => self.unknown_kind += 1,
            WireError::KindMismatch { .. } => self.kind_mismatch += 1,
            WireError::Invalid(_) => self.invalid += 1,
            WireError::EmptyFrame => self.empty += 1,
            _ => self.other += 1,
        }
    }
}

fn random_bytes(rng: &mut StdRng, max_len: usize) -> Vec<u8> {
    let mut v = vec![0u8; rng.random_range(0..=max_len)];
    rng.fill(&mut v[..]);
    v
}

fn flip(rng: &mut StdRng, bytes: &mut [u8], from: usize) {
    if bytes.len() > from {
        for _ in 0..rng.random_range(1..=8) {
            let i = rng.random_range(from..bytes.len());
            bytes[i] ^= rng.random_range(1..=255u8);
        }
    }
}

fn set_len(rng: &mut StdRng, bytes: &mut [u8], limit: usize) {
    if bytes.len() < 4 {
        return;
    }
    let old = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let new = match rng.random_range(0..6) {
        0 => rng.random::<u32>(),
        1 => u32::MAX,
        2 => old.wrapping_add(rng.random_range(1..16)),
        3 => old.saturating_sub(rng.random_range(1..16)),
        4 => (limit as u32)
            .wrapping_add(rng.random_range(0..3))
            .wrapping_sub(1),
        _ => rng.random_range(0..4),
    };
    bytes[..4].copy_from_slice(&new.to_le_bytes());
}

/// One mutation of a corpus frame (or fresh random bytes). Returns the input and, when it
/// is an unchanged frame, the message it must decode to.
fn mutate<'a>(
    rng: &mut StdRng,
    corpus: &'a Corpus,
    limit: usize,
) -> (Vec<u8>, Option<&'a Message>) {
    let pick = rng.random_range(0..corpus.frames.len());
    let mut bytes = corpus.frames[pick].clone();
    match rng.random_range(0..100) {
        0..10 => return (random_bytes(rng, 300), None),
        10..25 => return (bytes, Some(&corpus.messages[pick])),
        25..45 => flip(rng, &mut bytes, 0),
        45..55 => flip(rng, &mut bytes, FRAME_HEADER_BYTES),
        55..65 => {
            let cut = rng.random_range(0..bytes.len());
            bytes.truncate(cut);
        }
        65..75 => {
            let extra = random_bytes(rng, 64);
            bytes.extend_from_slice(&extra);
        }
        75..85 => set_len(rng, &mut bytes, limit),
        85..90 => bytes[4] = rng.random(),
        _ => {
            let other = rng.random_range(0..corpus.frames.len());
            let mut second = corpus.frames[other].clone();
            flip(rng, &mut second, 0);
            if rng.random_bool(0.5) {
                bytes.extend_from_slice(&second);
            } else {
                second.extend_from_slice(&bytes);
                bytes = second;
            }
        }
    }
    if rng.random_bool(0.2) {
        flip(rng, &mut bytes, 0);
    }
    (bytes, None)
}

/// Feeds one input; checks the decoder's contract along the way.
fn run_one(
    rng: &mut StdRng,
    input: &[u8],
    expect: Option<&Message>,
    limits: FrameLimits,
    counters: &Arc<WireCounters>,
    tally: &mut Tally,
) {
    let bound = limits.frame_bytes_max + FRAME_HEADER_BYTES;
    let mut decoder = FrameDecoder::with_counters(limits, counters.clone());
    let mut decoded = Vec::new();
    let mut error = None;
    let mut rest = input;
    while !rest.is_empty() && error.is_none() {
        let n = if rng.random_bool(0.5) {
            rest.len()
        } else {
            rng.random_range(1..=rest.len())
        };
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        decoder.push(chunk);
        assert!(
            decoder.buffered_bytes() <= bound + chunk.len(),
            "buffered {} after a push of {}",
            decoder.buffered_bytes(),
            chunk.len()
        );
        loop {
            match decoder.next_frame() {
                Ok(Some(m)) => decoded.push(m),
                Ok(None) => break,
                Err(e) => {
                    assert_eq!(
                        decoder.next_frame().unwrap_err(),
                        e,
                        "a poisoned decoder repeats its error"
                    );
                    decoder.push(rest);
                    assert_eq!(
                        decoder.buffered_bytes(),
                        0,
                        "a poisoned decoder drops input"
                    );
                    error = Some(e);
                    break;
                }
            }
        }
        let buffered = decoder.buffered_bytes();
        assert!(
            buffered <= bound,
            "buffered {buffered} > limit + header {bound}"
        );
        tally.max_buffered_after_drain = tally.max_buffered_after_drain.max(buffered);
    }
    let end = match error {
        Some(e) => {
            assert_eq!(decoder.finish().unwrap_err(), e);
            Err(e)
        }
        None => decoder.finish(),
    };
    tally.inputs += 1;
    tally.messages += decoded.len() as u64;
    if let Err(e) = &end {
        tally.count(e);
    }
    if let Some(message) = expect {
        let fits = input.len() - FRAME_LEN_BYTES <= limits.frame_bytes_max;
        if fits {
            assert!(end.is_ok(), "a valid frame was refused: {end:?}");
            assert!(
                decoded.len() == 1 && same(&decoded[0], message),
                "a valid frame decoded wrong"
            );
            tally.clean_ok += 1;
        } else {
            assert!(
                matches!(end, Err(WireError::FrameTooLarge { .. })),
                "{end:?}"
            );
        }
    }
}

#[test]
fn a_million_random_and_mutated_frames() {
    let frames = env_u64("HARP_WIRE_FUZZ_FRAMES", FRAMES_DEFAULT);
    let seed = env_u64("HARP_WIRE_FUZZ_SEED", SEED_DEFAULT);
    println!("harp-wire fuzz: {frames} inputs, seed {seed} (HARP_WIRE_FUZZ_SEED={seed} replays)");
    let corpus = corpus();
    let started = Instant::now();
    let results: Vec<(Tally, Arc<WireCounters>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let corpus = &corpus;
                scope.spawn(move || {
                    let mut rng =
                        StdRng::seed_from_u64(seed ^ t.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let counters = Arc::new(WireCounters::new());
                    let mut tally = Tally::default();
                    let share = frames / THREADS + u64::from(t < frames % THREADS);
                    for _ in 0..share {
                        let limits = if rng.random_bool(0.7) {
                            FrameLimits::default()
                        } else {
                            FrameLimits::new(rng.random_range(2..8192))
                        };
                        let (input, expect) = mutate(&mut rng, corpus, limits.frame_bytes_max);
                        run_one(&mut rng, &input, expect, limits, &counters, &mut tally);
                    }
                    (tally, counters)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    let mut tally = Tally::default();
    let mut counted = WireCountersSnapshot::default();
    for (t, c) in &results {
        tally.add(t);
        let s = c.snapshot();
        counted.frames_decoded += s.frames_decoded;
        counted.frame_too_large += s.frame_too_large;
        counted.truncated += s.truncated;
        counted.unknown_kind += s.unknown_kind;
        counted.kind_mismatch += s.kind_mismatch;
        counted.invalid += s.invalid;
        counted.empty_frame += s.empty_frame;
        counted.protocol_version += s.protocol_version;
        counted.wrong_job += s.wrong_job;
        counted.encode += s.encode;
    }
    println!("{tally:?}");
    println!(
        "harp-wire fuzz: {} inputs in {:.2} s ({:.0} inputs/s)",
        tally.inputs,
        elapsed.as_secs_f64(),
        tally.inputs as f64 / elapsed.as_secs_f64()
    );

    assert_eq!(tally.inputs, frames);
    assert_eq!(
        tally.other, 0,
        "only frame-level errors can come out of the decoder"
    );
    // Every rejection counted once, every message counted.
    assert_eq!(counted.frames_decoded, tally.messages);
    assert_eq!(counted.rejections(), tally.errors());
    assert_eq!(
        (
            counted.frame_too_large,
            counted.truncated,
            counted.unknown_kind,
            counted.kind_mismatch,
            counted.invalid,
            counted.empty_frame
        ),
        (
            tally.too_large,
            tally.truncated,
            tally.unknown_kind,
            tally.kind_mismatch,
            tally.invalid,
            tally.empty
        )
    );
    if frames >= 100_000 {
        // The mutations reach every rejection path and plenty of valid frames.
        for (what, n) in [
            ("frame_too_large", tally.too_large),
            ("truncated", tally.truncated),
            ("unknown_kind", tally.unknown_kind),
            ("kind_mismatch", tally.kind_mismatch),
            ("invalid", tally.invalid),
            ("empty_frame", tally.empty),
            ("clean frames decoded", tally.clean_ok),
        ] {
            assert!(n > 0, "no input reached {what}");
        }
    }
}
