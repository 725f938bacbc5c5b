//! The counter executor's movable state: a pattern of `state_bytes` bytes that depends on the
//! executor and on each 8-byte word's position, so a state that arrives truncated, reordered,
//! mixed up with another executor's or corrupted is refused when the executor is restored.
//!
//! Saved form: `b"HCTR"`, the executor id (u32 LE), the micro-tasks it has run (u64 LE), then
//! the pattern. The ballast keeps its pattern in that form, so an executor that moves hands
//! its buffer over ([`Ballast::into_saved`]) and the restored one keeps the buffer it was
//! given ([`Ballast::restore`]): the only pass over the bytes is the check, at memory speed.

use harp::{AppError, ExecutorId};

const MAGIC: &[u8; 4] = b"HCTR";
const HEADER: usize = 16;
/// Bytes of one pattern word.
const WORD: usize = 8;
/// The step between consecutive words' position terms.
const STEP: u64 = 0x9E37_79B9_7F4A_7C15;
/// Words checked per block before looking at the block's result (keeps the loop branch-free).
const BLOCK_WORDS: usize = 4096;

/// What a counter executor carries from worker to worker.
#[derive(Debug)]
pub struct Ballast {
    executor: ExecutorId,
    /// Micro-tasks this executor has run, wherever it ran them.
    pub tasks_run: u64,
    /// The saved form: header (rewritten when saved), then the pattern.
    saved: Vec<u8>,
}

/// Word `i` of executor `id`'s pattern.
fn word(id: ExecutorId, i: u64) -> u64 {
    (u64::from(id.0) << 48) ^ i.wrapping_mul(STEP)
}

/// `bytes` bytes of executor `id`'s pattern, after `header` zero bytes.
fn pattern(id: ExecutorId, header: usize, bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(header + bytes);
    out.resize(header, 0);
    let mut i = 0;
    while out.len() < header + bytes {
        let w = word(id, i).to_le_bytes();
        let take = (header + bytes - out.len()).min(WORD);
        out.extend_from_slice(&w[..take]);
        i += 1;
    }
    out
}

/// The first byte of `body` that differs from executor `id`'s pattern, if any.
fn first_difference(id: ExecutorId, body: &[u8]) -> Option<usize> {
    let high = u64::from(id.0) << 48;
    for (b, block) in body.chunks(BLOCK_WORDS * WORD).enumerate() {
        let first = (b * BLOCK_WORDS) as u64;
        let mut position = first.wrapping_mul(STEP);
        let mut differs = 0u64;
        let words = block.chunks_exact(WORD);
        let tail = words.remainder();
        for w in words {
            let mut bytes = [0u8; WORD];
            bytes.copy_from_slice(w);
            differs |= u64::from_le_bytes(bytes) ^ high ^ position;
            position = position.wrapping_add(STEP);
        }
        let tail_differs = tail != &(high ^ position).to_le_bytes()[..tail.len()];
        if differs != 0 || tail_differs {
            let start = b * BLOCK_WORDS * WORD;
            return block
                .chunks(WORD)
                .enumerate()
                .find(|(i, w)| *w != &word(id, first + *i as u64).to_le_bytes()[..w.len()])
                .map(|(i, _)| start + i * WORD);
        }
    }
    None
}

impl Ballast {
    pub fn new(executor: ExecutorId, bytes: u64) -> Result<Self, AppError> {
        let bytes = usize::try_from(bytes)
            .map_err(|_| format!("counter: --state-bytes {bytes} does not fit in memory"))?;
        Ok(Self {
            executor,
            tasks_run: 0,
            saved: pattern(executor, HEADER, bytes),
        })
    }

    pub fn executor(&self) -> ExecutorId {
        self.executor
    }

    /// The saved form, copied (the ballast stays).
    pub fn save(&self) -> Vec<u8> {
        let mut out = self.saved.clone();
        self.write_header(&mut out);
        out
    }

    /// The saved form, in the ballast's own buffer (no copy).
    pub fn into_saved(mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.saved);
        self.write_header(&mut out);
        out
    }

    fn write_header(&self, out: &mut [u8]) {
        if let Some(h) = out.get_mut(..HEADER) {
            h[..4].copy_from_slice(MAGIC);
            h[4..8].copy_from_slice(&self.executor.0.to_le_bytes());
            h[8..16].copy_from_slice(&self.tasks_run.to_le_bytes());
        }
    }

    /// The ballast saved in `state`, checked against what `executor` with `bytes` of state
    /// must carry; it keeps `state` as its buffer.
    pub fn restore(executor: ExecutorId, bytes: u64, state: Vec<u8>) -> Result<Self, AppError> {
        let bad = |why: String| -> AppError {
            format!("counter: the saved state of {executor} is damaged: {why}").into()
        };
        if state.len() < HEADER || &state[..4] != MAGIC {
            return Err(bad(format!(
                "{} bytes without a counter header",
                state.len()
            )));
        }
        let field = |range: std::ops::Range<usize>| {
            state[range]
                .iter()
                .rev()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
        };
        let saved_id = field(4..8);
        if saved_id != u64::from(executor.0) {
            return Err(bad(format!("it belongs to executor-{saved_id}")));
        }
        let body = &state[HEADER..];
        if body.len() as u64 != bytes {
            return Err(bad(format!(
                "{} bytes of state, expected {bytes}",
                body.len()
            )));
        }
        if let Some(at) = first_difference(executor, body) {
            return Err(bad(format!("bytes {at}.. differ from the pattern")));
        }
        Ok(Self {
            executor,
            tasks_run: field(8..16),
            saved: state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_ballast_restores_with_its_task_count() {
        let mut b = Ballast::new(ExecutorId(3), 1001).unwrap();
        b.tasks_run = 42;
        let back = Ballast::restore(ExecutorId(3), 1001, b.save()).unwrap();
        assert_eq!(back.tasks_run, 42);
        assert_eq!(back.saved[HEADER..], b.saved[HEADER..]);
    }

    #[test]
    fn a_ballast_handed_over_restores_in_its_own_buffer() {
        let mut b = Ballast::new(ExecutorId(5), 100_000).unwrap();
        b.tasks_run = 7;
        let copy = b.save();
        let saved = b.into_saved();
        assert_eq!(
            saved, copy,
            "handed over or copied, the saved form is the same"
        );
        let at = saved.as_ptr();
        let back = Ballast::restore(ExecutorId(5), 100_000, saved).unwrap();
        assert_eq!(back.tasks_run, 7);
        assert_eq!(
            back.saved.as_ptr(),
            at,
            "the restored ballast kept the buffer"
        );
        assert_eq!(back.into_saved(), copy);
    }

    #[test]
    fn damaged_states_are_refused() {
        let saved = Ballast::new(ExecutorId(3), 64).unwrap().save();
        let mut flipped = saved.clone();
        flipped[HEADER + 40] ^= 1;
        let mut swapped = saved.clone();
        swapped[HEADER..].rotate_left(8);
        for (state, id, bytes, why) in [
            (&flipped, 3, 64, "bytes 40.. differ"),
            (&swapped, 3, 64, "bytes 0.. differ"),
            (&saved, 4, 64, "belongs to executor-3"),
            (&saved, 3, 65, "expected 65"),
            (&saved[..10].to_vec(), 3, 64, "without a counter header"),
        ] {
            let e = Ballast::restore(ExecutorId(id), bytes, state.clone()).unwrap_err();
            assert!(e.to_string().contains(why), "{e} (wanted {why})");
        }
    }

    #[test]
    fn the_check_finds_any_changed_byte_in_any_block() {
        // Several blocks and a last word of 5 bytes.
        let bytes = 3 * BLOCK_WORDS * WORD + 5;
        let good = pattern(ExecutorId(9), 0, bytes);
        assert_eq!(first_difference(ExecutorId(9), &good), None);
        assert!(first_difference(ExecutorId(8), &good).is_some());
        for at in [
            0,
            7,
            8,
            BLOCK_WORDS * WORD - 1,
            BLOCK_WORDS * WORD,
            2 * BLOCK_WORDS * WORD + 17,
            bytes - 1,
        ] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert_eq!(
                first_difference(ExecutorId(9), &bad),
                Some(at - at % WORD),
                "byte {at}"
            );
        }
    }
}
