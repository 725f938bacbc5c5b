//! The counter executor's movable state: a pattern of `state_bytes` bytes that depends on the
//! executor and on each 8-byte word's position, so a state that arrives truncated, reordered,
//! mixed up with another executor's or corrupted is refused when the executor is restored.
//!
//! Saved form: `b"HCTR"`, the executor id (u32 LE), the micro-tasks it has run (u64 LE), then
//! the pattern.

use harp::{AppError, ExecutorId};

const MAGIC: &[u8; 4] = b"HCTR";
const HEADER: usize = 16;

/// What a counter executor carries from worker to worker.
#[derive(Debug)]
pub struct Ballast {
    executor: ExecutorId,
    /// Micro-tasks this executor has run, wherever it ran them.
    pub tasks_run: u64,
    pattern: Vec<u8>,
}

/// Word `i` of executor `id`'s pattern.
fn word(id: ExecutorId, i: u64) -> u64 {
    (u64::from(id.0) << 48) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn pattern(id: ExecutorId, bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes);
    let mut i = 0;
    while out.len() < bytes {
        let w = word(id, i).to_le_bytes();
        let take = (bytes - out.len()).min(8);
        out.extend_from_slice(&w[..take]);
        i += 1;
    }
    out
}

impl Ballast {
    pub fn new(executor: ExecutorId, bytes: u64) -> Result<Self, AppError> {
        let bytes = usize::try_from(bytes)
            .map_err(|_| format!("counter: --state-bytes {bytes} does not fit in memory"))?;
        Ok(Self {
            executor,
            tasks_run: 0,
            pattern: pattern(executor, bytes),
        })
    }

    pub fn executor(&self) -> ExecutorId {
        self.executor
    }

    pub fn save(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.pattern.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.executor.0.to_le_bytes());
        out.extend_from_slice(&self.tasks_run.to_le_bytes());
        out.extend_from_slice(&self.pattern);
        out
    }

    /// The ballast saved in `state`, checked against what `executor` with `bytes` of state
    /// must carry.
    pub fn restore(executor: ExecutorId, bytes: u64, state: &[u8]) -> Result<Self, AppError> {
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
        for (i, chunk) in body.chunks(8).enumerate() {
            let want = word(executor, i as u64).to_le_bytes();
            if chunk != &want[..chunk.len()] {
                return Err(bad(format!("bytes {}.. differ from the pattern", i * 8)));
            }
        }
        Ok(Self {
            executor,
            tasks_run: field(8..16),
            pattern: body.to_vec(),
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
        let back = Ballast::restore(ExecutorId(3), 1001, &b.save()).unwrap();
        assert_eq!(back.tasks_run, 42);
        assert_eq!(back.pattern, b.pattern);
    }

    #[test]
    fn damaged_states_are_refused() {
        let saved = Ballast::new(ExecutorId(3), 64).unwrap().save();
        let mut flipped = saved.clone();
        flipped[HEADER + 40] ^= 1;
        let mut swapped = saved.clone();
        swapped[HEADER..].rotate_left(8);
        for (state, id, bytes, why) in [
            (&flipped, 3, 64, "differ"),
            (&swapped, 3, 64, "differ"),
            (&saved, 4, 64, "belongs to executor-3"),
            (&saved, 3, 65, "expected 65"),
            (&saved[..10].to_vec(), 3, 64, "without a counter header"),
        ] {
            let e = Ballast::restore(ExecutorId(id), bytes, state).unwrap_err();
            assert!(e.to_string().contains(why), "{e} (wanted {why})");
        }
    }
}
