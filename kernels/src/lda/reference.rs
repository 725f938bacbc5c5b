//! Plain `f64` references for the LDA samplers: same contracts and errors, each
//! token's conditional computed in double precision straight from the formula
//! `p(k) ∝ (n_dk + α)(n_wk + β) / (n_k + Vβ)` and summed in natural topic order. The
//! samplers draw the same uniforms as their fast versions, so tests can compare
//! topics token by token.

use super::{validate, validate_parallel, Counts, CountsMut, FastRng, LdaParams, Tokens};
use crate::error::{check_len, KernelError};

/// The normalized collapsed conditional of one token, in `f64`: `doc_row`, `word_row`
/// and `totals` are its `K` counts, and `exclude` (the token's own topic, if it is
/// counted in them) is subtracted first (saturating at 0).
///
/// # Errors
/// [`LdaParams::validate`]'s errors; [`KernelError::LengthMismatch`] if a slice is not
/// `K` long; [`KernelError::IndexOutOfRange`] if `exclude >= K`.
pub fn conditional_reference(
    params: &LdaParams,
    doc_row: &[u32],
    word_row: &[u32],
    totals: &[u32],
    exclude: Option<u32>,
) -> Result<Vec<f64>, KernelError> {
    params.validate()?;
    let k = params.topics;
    check_len("doc_row", k, doc_row.len())?;
    check_len("word_row", k, word_row.len())?;
    check_len("totals", k, totals.len())?;
    if let Some(z) = exclude.filter(|&z| z as usize >= k) {
        return Err(KernelError::IndexOutOfRange {
            what: "exclude",
            position: 0,
            index: u64::from(z),
        });
    }
    let mut p = weights(
        params,
        doc_row,
        word_row,
        totals,
        exclude.map(|z| z as usize),
    );
    let total: f64 = p.iter().sum();
    for v in &mut p {
        *v /= total;
    }
    Ok(p)
}

/// Unnormalized `f64` weights with the `exclude` topic's counts reduced by one.
fn weights(
    params: &LdaParams,
    doc_row: &[u32],
    word_row: &[u32],
    totals: &[u32],
    exclude: Option<usize>,
) -> Vec<f64> {
    let (alpha, beta) = (f64::from(params.alpha), f64::from(params.beta));
    let vbeta = params.vocab as f64 * beta;
    (0..params.topics)
        .map(|k| {
            let e = u32::from(exclude == Some(k));
            let nd = f64::from(doc_row[k].saturating_sub(e));
            let nw = f64::from(word_row[k].saturating_sub(e));
            let nt = f64::from(totals[k].saturating_sub(e));
            (nd + alpha) * (nw + beta) / (nt + vbeta)
        })
        .collect()
}

/// The first topic whose cumulative weight exceeds `u · total`, else the last one.
fn draw(p: &[f64], u: f64) -> usize {
    let total: f64 = p.iter().sum();
    let target = u * total;
    let mut cum = 0.0;
    for (k, &v) in p.iter().enumerate() {
        cum += v;
        if cum > target {
            return k;
        }
    }
    p.len() - 1
}

/// Reference for [`gibbs_sweep`](super::gibbs_sweep): same contract, same errors, one
/// `rng.next_f32()` per token.
pub fn gibbs_sweep_reference(
    params: &LdaParams,
    tokens: Tokens<'_>,
    topics: &mut [u32],
    counts: CountsMut<'_>,
    rng: &mut FastRng,
) -> Result<(), KernelError> {
    validate(params, tokens, topics, counts.as_counts())?;
    let k = params.topics;
    let base = counts.word_base as usize;
    let CountsMut {
        doc_topic,
        word_topic,
        topic_totals,
        ..
    } = counts;
    for (i, topic) in topics.iter_mut().enumerate() {
        let d = tokens.docs[i] as usize * k;
        let w = (tokens.words[i] as usize - base) * k;
        let z = *topic as usize;
        if doc_topic[d + z] == 0 || word_topic[w + z] == 0 || topic_totals[z] == 0 {
            return Err(KernelError::InconsistentCounts { position: i });
        }
        doc_topic[d + z] -= 1;
        word_topic[w + z] -= 1;
        topic_totals[z] -= 1;
        let p = weights(
            params,
            &doc_topic[d..d + k],
            &word_topic[w..w + k],
            topic_totals,
            None,
        );
        let new = draw(&p, f64::from(rng.next_f32()));
        doc_topic[d + new] += 1;
        word_topic[w + new] += 1;
        topic_totals[new] += 1;
        *topic = new as u32;
    }
    Ok(())
}

/// Reference for [`sample_parallel`](super::sample_parallel): same contract and errors,
/// `f64` weights summed in natural order.
pub fn sample_parallel_reference(
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
    let base = counts.word_base as usize;
    for i in 0..n {
        let d = tokens.docs[i] as usize * k;
        let w = (tokens.words[i] as usize - base) * k;
        let p = weights(
            params,
            &counts.doc_topic[d..d + k],
            &counts.word_topic[w..w + k],
            counts.topic_totals,
            Some(topics[i] as usize),
        );
        new_topics[i] = draw(&p, f64::from(uniforms[i])) as u32;
    }
    Ok(())
}
