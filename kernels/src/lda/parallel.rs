//! The "parallel sampling step": every token sampled from the same FIXED counts, with
//! only its own assignment excluded, from a uniform supplied per token. This is the
//! contract of the CUDA kernel (`kernels/cuda/lda.cu`, whose variant is chosen by K); the CPU
//! version here performs the same single-precision operations in the same order so
//! the two agree bit for bit wherever the hardware rounds alike. Counts are rebuilt
//! from the new topics afterwards by [`rebuild_counts`].
//!
//! # Arithmetic (shared with the CUDA kernel)
//! With `e_k = 1` if `k == topics[i]` else 0 and every count reduced by `e_k`
//! (saturating at 0), in `f32`, no fused multiply-adds:
//! `p_k = ((n_dk + α) · (n_wk + β)) · (1 / (n_k + Vβ))`, `Vβ = params.vbeta()`.
//! Topics are taken in chunks of [`PARALLEL_CHUNK`] (= 32, a warp); within a chunk the
//! inclusive prefix sums are formed Hillis–Steele style (offsets 1, 2, 4, 8, 16: lane
//! `j` adds lane `j - off`'s previous value), padded with zeros past `K`; a running sum
//! adds each chunk's last prefix in chunk order, giving the total `T`. The new topic is
//! the first `k` whose cumulative value (running sum before its chunk + its in-chunk
//! prefix) exceeds `u · T`, or `K - 1` if none does (only possible by rounding).
//!
//! # Bytes per token
//! Logically each token reads its document id, word id, topic and uniform (16 B),
//! writes its new topic (4 B) and reads its document row and word row (`2 · 4K` B):
//! `8K + 20` bytes per token (180 B at K = 20, 8212 B at K = 1024). The `4K`-byte topic
//! totals are shared by all tokens and not counted.

use super::{validate, validate_parallel, Counts, CountsMut, LdaParams, Tokens};
use crate::error::KernelError;

/// Topics per chunk of the parallel step's summation order (one CUDA warp).
pub const PARALLEL_CHUNK: usize = 32;

/// One parallel sampling step (see this module's docs, `kernels/src/lda/parallel.rs`, for the exact arithmetic).
///
/// `new_topics[i]` receives token `i`'s topic sampled from the fixed `counts` with its
/// current assignment `topics[i]` excluded, using `uniforms[i]` in `[0, 1)`. The counts
/// are only read; a count that is already 0 where the token's own assignment would be
/// removed is treated as 0 (not an error: call [`rebuild_counts`] to keep counts exact).
///
/// # Errors
/// As [`gibbs_sweep`](super::gibbs_sweep)'s validation, plus
/// [`KernelError::LengthMismatch`] if `uniforms` or `new_topics` differ in length from
/// the tokens, and [`KernelError::InvalidValue`] for a uniform outside `[0, 1)`. On
/// error nothing is written.
pub fn sample_parallel(
    params: &LdaParams,
    tokens: Tokens<'_>,
    topics: &[u32],
    counts: Counts<'_>,
    uniforms: &[f32],
    new_topics: &mut [u32],
) -> Result<(), KernelError> {
    validate_parallel(params, tokens, topics, counts, uniforms, new_topics.len())?;
    let n = topics.len();
    let k = params.topics;
    let (alpha, beta, vbeta) = (params.alpha, params.beta, params.vbeta());
    let base = counts.word_base as usize;
    let totals = counts.topic_totals;
    for i in 0..n {
        let d = tokens.docs[i] as usize * k;
        let w = (tokens.words[i] as usize - base) * k;
        let drow = &counts.doc_topic[d..d + k];
        let wrow = &counts.word_topic[w..w + k];
        let z = topics[i] as usize;
        let p = |j: usize| -> f32 {
            let e = u32::from(j == z);
            let nd = drow[j].saturating_sub(e) as f32;
            let nw = wrow[j].saturating_sub(e) as f32;
            let nt = totals[j].saturating_sub(e) as f32;
            ((nd + alpha) * (nw + beta)) * (1.0 / (nt + vbeta))
        };
        new_topics[i] = select(k, p, uniforms[i]) as u32;
    }
    Ok(())
}

/// Inclusive prefix sums of chunk `c` in the warp-scan order; lanes past `k` hold 0.
fn chunk_scan(k: usize, c: usize, p: &impl Fn(usize) -> f32) -> [f32; PARALLEL_CHUNK] {
    let mut s = [0.0f32; PARALLEL_CHUNK];
    let start = c * PARALLEL_CHUNK;
    for (j, v) in s.iter_mut().enumerate() {
        if start + j < k {
            *v = p(start + j);
        }
    }
    let mut off = 1;
    while off < PARALLEL_CHUNK {
        let prev = s;
        for j in off..PARALLEL_CHUNK {
            s[j] = prev[j] + prev[j - off];
        }
        off *= 2;
    }
    s
}

/// Draws a topic from the unnormalized weights `p(0..k)` with uniform `u`, in the
/// summation order shared with the CUDA kernel.
fn select(k: usize, p: impl Fn(usize) -> f32, u: f32) -> usize {
    let chunks = k.div_ceil(PARALLEL_CHUNK);
    let mut total = 0.0f32;
    for c in 0..chunks {
        total += chunk_scan(k, c, &p)[PARALLEL_CHUNK - 1];
    }
    let target = u * total;
    let mut running = 0.0f32;
    for c in 0..chunks {
        let s = chunk_scan(k, c, &p);
        let start = c * PARALLEL_CHUNK;
        let lanes = (k - start).min(PARALLEL_CHUNK);
        if let Some(j) = s[..lanes].iter().position(|&v| running + v > target) {
            return start + j;
        }
        running += s[PARALLEL_CHUNK - 1];
    }
    k - 1
}

/// Rebuilds all three count tables from the token assignments: zeroes them, then adds
/// one to `doc_topic[d][z]`, `word_topic[w - word_base][z]` and `topic_totals[z]` per
/// token.
///
/// # Errors
/// As [`gibbs_sweep`](super::gibbs_sweep)'s validation, plus
/// [`KernelError::ShapeOverflow`] for more than `u32::MAX` tokens; on error nothing is
/// written.
pub fn rebuild_counts(
    params: &LdaParams,
    tokens: Tokens<'_>,
    topics: &[u32],
    counts: CountsMut<'_>,
) -> Result<(), KernelError> {
    validate(params, tokens, topics, counts.as_counts())?;
    if u32::try_from(topics.len()).is_err() {
        // More tokens than a u32 count can hold.
        return Err(KernelError::ShapeOverflow { what: "tokens" });
    }
    let k = params.topics;
    let base = counts.word_base as usize;
    let CountsMut {
        doc_topic,
        word_topic,
        topic_totals,
        ..
    } = counts;
    doc_topic.fill(0);
    word_topic.fill(0);
    topic_totals.fill(0);
    for ((&d, &w), &z) in tokens.docs.iter().zip(tokens.words).zip(topics) {
        let z = z as usize;
        doc_topic[d as usize * k + z] += 1;
        word_topic[(w as usize - base) * k + z] += 1;
        topic_totals[z] += 1;
    }
    Ok(())
}
