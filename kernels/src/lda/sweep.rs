//! The sequential collapsed Gibbs sweep, the CPU hot loop of LDA training.
//!
//! Per token: remove its assignment from the three count tables, build the cumulative
//! distribution `c_k = Σ_{j≤k} (n_dj + α)(n_wj + β) · inv_j` with the topic-total
//! reciprocals `inv_j = 1 / (n_j + Vβ)` kept up to date incrementally (two divisions per
//! token, for the old and the new topic), draw one uniform, binary-search the
//! cumulative table, and add the assignment back. Nothing is allocated per token.

use super::{validate, CountsMut, FastRng, LdaParams, Tokens};
use crate::error::KernelError;

/// One sequential collapsed Gibbs sweep over `tokens`, in order.
///
/// `topics[i]` is token `i`'s current topic on entry and its new topic on exit; the
/// counts are updated in place so they stay consistent with `topics` after every
/// token. One uniform is drawn from `rng` per token. Layouts: see the [module
/// docs](super).
///
/// # Errors
/// Before anything is written: [`LdaParams::validate`]'s errors;
/// [`KernelError::LengthMismatch`] if the token slices differ in length, `topic_totals`
/// is not `K` long, or a count table is not a whole number of `K`-wide rows;
/// [`KernelError::IndexOutOfRange`] (first bad position) for a document row outside
/// `doc_topic`, a word id `>= V` or outside the `word_topic` block, or a topic `>= K`.
///
/// During the sweep: [`KernelError::InconsistentCounts`] if a count that token
/// `position`'s assignment must be removed from is 0 (the counts do not describe
/// `topics`). The sweep stops there: tokens before `position` have been resampled
/// (and the counts moved with them, so they are exactly as consistent as on entry),
/// token `position` and later ones are untouched.
pub fn gibbs_sweep(
    params: &LdaParams,
    tokens: Tokens<'_>,
    topics: &mut [u32],
    counts: CountsMut<'_>,
    rng: &mut FastRng,
) -> Result<(), KernelError> {
    validate(params, tokens, topics, counts.as_counts())?;
    let k = params.topics;
    let (alpha, beta, vbeta) = (params.alpha, params.beta, params.vbeta());
    let base = counts.word_base as usize;
    let CountsMut {
        doc_topic,
        word_topic,
        topic_totals: totals,
        ..
    } = counts;

    let mut inv: Vec<f32> = totals.iter().map(|&n| 1.0 / (n as f32 + vbeta)).collect();
    let mut cdf = vec![0.0f32; k];
    let last = k - 1;

    for (i, ((&d, &w), z)) in tokens
        .docs
        .iter()
        .zip(tokens.words)
        .zip(topics.iter_mut())
        .enumerate()
    {
        let d = d as usize * k;
        let w = (w as usize - base) * k;
        let old = *z as usize;
        let drow = &mut doc_topic[d..d + k];
        let wrow = &mut word_topic[w..w + k];

        if drow[old] == 0 || wrow[old] == 0 || totals[old] == 0 {
            return Err(KernelError::InconsistentCounts { position: i });
        }
        drow[old] -= 1;
        wrow[old] -= 1;
        totals[old] -= 1;
        inv[old] = 1.0 / (totals[old] as f32 + vbeta);

        let mut total = 0.0f32;
        for (((c, &nd), &nw), &iv) in cdf.iter_mut().zip(&*drow).zip(&*wrow).zip(&inv) {
            total += (nd as f32 + alpha) * (nw as f32 + beta) * iv;
            *c = total;
        }
        let target = rng.next_f32() * total;
        let new = cdf.partition_point(|&c| c <= target).min(last);

        drow[new] += 1;
        wrow[new] += 1;
        totals[new] += 1;
        inv[new] = 1.0 / (totals[new] as f32 + vbeta);
        *z = new as u32;
    }
    Ok(())
}
