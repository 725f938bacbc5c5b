//! LDA's parallel sampler (`LdaSampler::Parallel`, and the only one on the GPU): every
//! token of a block draws its new topic from the counts as they were at the start of the
//! sub-round (its own assignment excluded; `harp_kernels::lda::sample_parallel`, or its
//! CUDA twin, which gives the same bits), with uniforms from a counter-based generator
//! ([`harp_kernels::lda::counter_uniform`]); the moves are then applied to the counts here,
//! one token at a time, so the tables stay exact. Within a block the draws do not see each
//! other's moves (AD-LDA style); across blocks and sub-rounds the model is the sequential
//! sampler's.

use harp_kernels::lda::counter_uniform;

/// The uniforms of `n` tokens for the sub-round seeded `seed` (the host twin of the GPU's
/// generator).
pub(super) fn uniforms(seed: u64, n: usize) -> Vec<f32> {
    (0..n as u64).map(|i| counter_uniform(seed, i)).collect()
}

/// The count tables a block's moves change: the executor's document–topic counts, the
/// block's word–topic rows (row 0 is word `word_base`) and the topic totals.
pub(super) struct BlockCounts<'a> {
    pub topics: usize,
    pub doc_topic: &'a mut [u32],
    pub word_topic: &'a mut [u32],
    pub word_base: u32,
    pub totals: &'a mut [u32],
}

/// Moves each token `i` (document row `docs[i]`, word `words[i]`) from `topics[i]` to
/// `new_topics[i]` in the counts and in `topics`. A count that would go below zero (counts
/// that do not contain the token's assignment) is an error naming the token; the counts
/// are then partly moved and must be discarded (the task fails).
pub(super) fn apply_moves(
    docs: &[u32],
    words: &[u32],
    topics: &mut [u32],
    new_topics: &[u32],
    counts: BlockCounts<'_>,
) -> Result<(), String> {
    let k = counts.topics;
    let base = counts.word_base as usize;
    for (i, (((&d, &w), z), &new)) in docs
        .iter()
        .zip(words)
        .zip(topics.iter_mut())
        .zip(new_topics)
        .enumerate()
    {
        let old = *z as usize;
        let new = new as usize;
        if old == new {
            continue;
        }
        let (d, w) = (d as usize * k, (w as usize).wrapping_sub(base) * k);
        let cells = [
            counts.doc_topic.get(d + old).copied(),
            counts.word_topic.get(w + old).copied(),
            counts.totals.get(old).copied(),
        ];
        let in_range =
            new < k && d + new < counts.doc_topic.len() && w + new < counts.word_topic.len();
        if !in_range || cells.iter().any(|c| c.is_none_or(|n| n == 0)) {
            return Err(format!(
                "the counts do not contain the assignment of token {i} (or its new topic {new} is out of range)"
            ));
        }
        counts.doc_topic[d + old] -= 1;
        counts.word_topic[w + old] -= 1;
        counts.totals[old] -= 1;
        counts.doc_topic[d + new] += 1;
        counts.word_topic[w + new] += 1;
        counts.totals[new] += 1;
        *z = new as u32;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_keep_every_table_equal_to_the_assignments() {
        // 2 documents, words 10..13, K = 3.
        let docs = [0, 0, 1, 1, 1];
        let words = [10, 12, 10, 11, 12];
        let mut topics = vec![0, 1, 2, 2, 0];
        let counts_of = |topics: &[u32]| {
            let (mut dt, mut wt, mut tt) = (vec![0u32; 6], vec![0u32; 9], vec![0u32; 3]);
            for ((&d, &w), &z) in docs.iter().zip(&words).zip(topics) {
                dt[d as usize * 3 + z as usize] += 1;
                wt[(w as usize - 10) * 3 + z as usize] += 1;
                tt[z as usize] += 1;
            }
            (dt, wt, tt)
        };
        let (mut dt, mut wt, mut tt) = counts_of(&topics);
        let new = [2, 1, 0, 2, 1];
        apply_moves(
            &docs,
            &words,
            &mut topics,
            &new,
            BlockCounts {
                topics: 3,
                doc_topic: &mut dt,
                word_topic: &mut wt,
                word_base: 10,
                totals: &mut tt,
            },
        )
        .unwrap();
        assert_eq!(topics, new);
        assert_eq!((dt, wt, tt), counts_of(&new));
    }

    #[test]
    fn counts_without_the_assignment_are_refused() {
        let mut topics = vec![1];
        let (mut dt, mut wt, mut tt) = (vec![0, 1], vec![0, 0], vec![0, 1]);
        let error = apply_moves(
            &[0],
            &[5],
            &mut topics,
            &[0],
            BlockCounts {
                topics: 2,
                doc_topic: &mut dt,
                word_topic: &mut wt,
                word_base: 5,
                totals: &mut tt,
            },
        )
        .unwrap_err();
        assert!(error.contains("token 0"), "{error}");
        assert_eq!(topics, [1]);
        // A new topic beyond K is refused too.
        let (mut dt, mut wt, mut tt) = (vec![0, 1], vec![0, 1], vec![0, 1]);
        let error = apply_moves(
            &[0],
            &[5],
            &mut topics,
            &[7],
            BlockCounts {
                topics: 2,
                doc_topic: &mut dt,
                word_topic: &mut wt,
                word_base: 5,
                totals: &mut tt,
            },
        )
        .unwrap_err();
        assert!(error.contains("out of range"), "{error}");
    }

    #[test]
    fn uniforms_are_the_counter_generator() {
        let u = uniforms(9, 1000);
        assert_eq!(u.len(), 1000);
        assert!(u.iter().all(|x| (0.0..1.0).contains(x)));
        assert_eq!(u[17], counter_uniform(9, 17));
        assert_ne!(uniforms(9, 4), uniforms(10, 4));
    }
}
