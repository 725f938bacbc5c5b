//! The LDA samplers keep the counts consistent, draw from the exact collapsed
//! conditional, agree with their f64 references, and improve the joint likelihood.

use harp_kernels::lda::reference::{
    conditional_reference, gibbs_sweep_reference, sample_parallel_reference,
};
use harp_kernels::lda::{
    gibbs_sweep, log_likelihood, rebuild_counts, sample_parallel, Counts, CountsMut, FastRng,
    LdaParams, Tokens,
};

/// A corpus with its assignments and counts.
#[derive(Clone)]
struct State {
    params: LdaParams,
    docs: Vec<u32>,
    words: Vec<u32>,
    topics: Vec<u32>,
    doc_topic: Vec<u32>,
    word_topic: Vec<u32>,
    totals: Vec<u32>,
}

impl State {
    /// `n_docs` documents of `len` tokens drawn from `params.topics` planted topics
    /// (each topic favours its own slice of the vocabulary; each document mixes two
    /// topics), with uniformly random initial assignments.
    fn planted(params: LdaParams, n_docs: usize, len: usize, seed: u64) -> State {
        let mut rng = FastRng::new(seed);
        let (k, v) = (params.topics as u32, params.vocab as u32);
        let slice = (v / k).max(1);
        let (mut docs, mut words, mut topics) = (vec![], vec![], vec![]);
        for d in 0..n_docs {
            let (a, b) = (rng.below(k), rng.below(k));
            for _ in 0..len {
                let t = if rng.next_f32() < 0.7 { a } else { b };
                let w = if rng.next_f32() < 0.9 {
                    (t * slice + rng.below(slice)) % v
                } else {
                    rng.below(v)
                };
                docs.push(d as u32);
                words.push(w);
                topics.push(rng.below(k));
            }
        }
        let mut s = State {
            params,
            docs,
            words,
            topics,
            doc_topic: vec![0; n_docs * params.topics],
            word_topic: vec![0; params.vocab * params.topics],
            totals: vec![0; params.topics],
        };
        s.rebuild();
        s
    }

    fn tokens(&self) -> Tokens<'_> {
        Tokens {
            docs: &self.docs,
            words: &self.words,
        }
    }

    fn rebuild(&mut self) {
        let tokens = Tokens {
            docs: &self.docs,
            words: &self.words,
        };
        let counts = CountsMut {
            doc_topic: &mut self.doc_topic,
            word_topic: &mut self.word_topic,
            word_base: 0,
            topic_totals: &mut self.totals,
        };
        rebuild_counts(&self.params, tokens, &self.topics, counts).unwrap();
    }

    fn sweep(&mut self, rng: &mut FastRng, reference: bool) {
        let tokens = Tokens {
            docs: &self.docs,
            words: &self.words,
        };
        let counts = CountsMut {
            doc_topic: &mut self.doc_topic,
            word_topic: &mut self.word_topic,
            word_base: 0,
            topic_totals: &mut self.totals,
        };
        if reference {
            gibbs_sweep_reference(&self.params, tokens, &mut self.topics, counts, rng).unwrap();
        } else {
            gibbs_sweep(&self.params, tokens, &mut self.topics, counts, rng).unwrap();
        }
    }

    fn counts(&self) -> Counts<'_> {
        Counts {
            doc_topic: &self.doc_topic,
            word_topic: &self.word_topic,
            word_base: 0,
            topic_totals: &self.totals,
        }
    }

    fn log_likelihood(&self) -> f64 {
        log_likelihood(
            &self.params,
            &self.doc_topic,
            &self.word_topic,
            &self.totals,
        )
        .unwrap()
    }
}

fn params(topics: usize, vocab: usize) -> LdaParams {
    LdaParams {
        topics,
        vocab,
        alpha: 0.1,
        beta: 0.01,
    }
}

#[test]
fn counts_stay_consistent_over_sweeps() {
    let mut s = State::planted(params(20, 500), 200, 50, 1);
    let n = s.docs.len() as u64;
    let mut rng = FastRng::new(7);
    let initial = s.topics.clone();
    for _ in 0..5 {
        s.sweep(&mut rng, false);
        let sum = |c: &[u32]| c.iter().map(|&x| u64::from(x)).sum::<u64>();
        assert_eq!(sum(&s.doc_topic), n);
        assert_eq!(sum(&s.word_topic), n);
        assert_eq!(sum(&s.totals), n);
        // The incrementally updated counts are exactly the ones rebuilt from the topics.
        let mut rebuilt = s.clone();
        rebuilt.rebuild();
        assert_eq!(rebuilt.doc_topic, s.doc_topic);
        assert_eq!(rebuilt.word_topic, s.word_topic);
        assert_eq!(rebuilt.totals, s.totals);
        // Every document keeps its length.
        for row in s.doc_topic.chunks_exact(20) {
            assert_eq!(row.iter().sum::<u32>(), 50);
        }
    }
    assert_ne!(s.topics, initial, "a sweep must move some tokens");
}

/// Pearson's chi-square statistic of observed counts against probabilities.
fn chi_square(observed: &[u64], probs: &[f64]) -> f64 {
    let n: u64 = observed.iter().sum();
    observed
        .iter()
        .zip(probs)
        .map(|(&o, &p)| {
            let e = p * n as f64;
            (o as f64 - e).powi(2) / e
        })
        .sum()
}

/// One document, one word and the topic totals, with widely varying counts so that
/// every factor of the conditional matters; the token sits in topic 0 (counted there).
fn single_token_state(k: usize, seed: u64) -> State {
    let mut rng = FastRng::new(seed);
    let params = LdaParams {
        topics: k,
        vocab: 100,
        alpha: 0.5,
        beta: 0.1,
    };
    let doc_topic: Vec<u32> = (0..k).map(|j| u32::from(j == 0) + rng.below(8)).collect();
    let word_topic: Vec<u32> = (0..k).map(|j| u32::from(j == 0) + rng.below(10)).collect();
    // Totals from 1 to ~3000, at least the document and word counts.
    let totals: Vec<u32> = (0..k)
        .map(|j| doc_topic[j] + word_topic[j] + (rng.next_f32().powi(3) * 3000.0) as u32)
        .collect();
    State {
        params,
        docs: vec![0],
        words: vec![0],
        topics: vec![0],
        doc_topic,
        word_topic,
        totals,
    }
}

// Chi-square tolerances: the 0.1% upper quantiles of the chi-square distribution with
// K - 1 degrees of freedom (the test fails with probability 0.001 for a correct sampler;
// the seeds are fixed, so the outcome is deterministic).
const CHI2_999_DOF7: f64 = 24.32;
const CHI2_999_DOF99: f64 = 148.2;

#[test]
fn sweep_draws_a_single_token_from_the_exact_conditional() {
    let k = 8;
    let mut s = single_token_state(k, 3);
    let probs =
        conditional_reference(&s.params, &s.doc_topic, &s.word_topic, &s.totals, Some(0)).unwrap();

    // Resampling one token leaves the other tokens' counts (its conditional) unchanged.
    let mut rng = FastRng::new(99);
    let mut hist = vec![0u64; k];
    for _ in 0..200_000 {
        let counts = CountsMut {
            doc_topic: &mut s.doc_topic,
            word_topic: &mut s.word_topic,
            word_base: 0,
            topic_totals: &mut s.totals,
        };
        let tokens = Tokens {
            docs: &s.docs,
            words: &s.words,
        };
        gibbs_sweep(&s.params, tokens, &mut s.topics, counts, &mut rng).unwrap();
        hist[s.topics[0] as usize] += 1;
    }
    let chi2 = chi_square(&hist, &probs);
    assert!(
        chi2 < CHI2_999_DOF7,
        "chi2 {chi2}, hist {hist:?}, p {probs:?}"
    );
}

#[test]
fn parallel_step_draws_from_the_exact_conditional() {
    // K = 100 spans four 32-topic chunks of the parallel summation order.
    let k = 100;
    let s = single_token_state(k, 5);
    let probs =
        conditional_reference(&s.params, &s.doc_topic, &s.word_topic, &s.totals, Some(0)).unwrap();
    // The same token repeated: each copy is sampled from the same fixed counts.
    let reps = 400_000;
    let (docs, words, topics) = (vec![0u32; reps], vec![0u32; reps], vec![0u32; reps]);
    let mut rng = FastRng::new(5);
    let uniforms: Vec<f32> = (0..reps).map(|_| rng.next_f32()).collect();
    let mut out = vec![0u32; reps];
    let tokens = Tokens {
        docs: &docs,
        words: &words,
    };
    sample_parallel(&s.params, tokens, &topics, s.counts(), &uniforms, &mut out).unwrap();
    let mut hist = vec![0u64; k];
    for &t in &out {
        hist[t as usize] += 1;
    }
    let chi2 = chi_square(&hist, &probs);
    assert!(chi2 < CHI2_999_DOF99, "chi2 {chi2}");
}

#[test]
fn sweep_matches_the_f64_reference() {
    // Same uniforms, same state: topics agree except where a uniform falls within
    // f32 rounding of a cumulative boundary (none expected at this size; 99% allowed
    // since one such difference also perturbs later tokens' counts slightly).
    for k in [3, 20, 64] {
        let s0 = State::planted(params(k, 300), 100, 40, 21);
        let (mut fast, mut slow) = (s0.clone(), s0);
        let (mut r1, mut r2) = (FastRng::new(4), FastRng::new(4));
        for _ in 0..3 {
            fast.sweep(&mut r1, false);
            slow.sweep(&mut r2, true);
        }
        let same = fast
            .topics
            .iter()
            .zip(&slow.topics)
            .filter(|(a, b)| a == b)
            .count();
        assert!(
            same as f64 >= 0.99 * fast.topics.len() as f64,
            "K={k}: {same}/{}",
            fast.topics.len()
        );
    }
}

#[test]
fn parallel_step_matches_the_f64_reference_token_by_token() {
    for k in [1, 7, 32, 33, 100, 1024] {
        let s = State::planted(params(k, 2000), 50, 60, 8);
        let mut rng = FastRng::new(12);
        let uniforms: Vec<f32> = (0..s.docs.len()).map(|_| rng.next_f32()).collect();
        let (mut a, mut b) = (vec![0u32; s.docs.len()], vec![0u32; s.docs.len()]);
        sample_parallel(
            &s.params,
            s.tokens(),
            &s.topics,
            s.counts(),
            &uniforms,
            &mut a,
        )
        .unwrap();
        sample_parallel_reference(
            &s.params,
            s.tokens(),
            &s.topics,
            s.counts(),
            &uniforms,
            &mut b,
        )
        .unwrap();
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(
            same as f64 >= 0.999 * a.len() as f64,
            "K={k}: {same}/{}",
            a.len()
        );
        assert!(a.iter().all(|&t| (t as usize) < k));
    }
}

#[test]
fn parallel_step_with_rebuild_keeps_counts_consistent() {
    let mut s = State::planted(params(16, 400), 80, 30, 2);
    let mut rng = FastRng::new(3);
    let before = s.log_likelihood();
    for _ in 0..10 {
        let uniforms: Vec<f32> = (0..s.docs.len()).map(|_| rng.next_f32()).collect();
        let mut out = vec![0u32; s.docs.len()];
        sample_parallel(
            &s.params,
            s.tokens(),
            &s.topics,
            s.counts(),
            &uniforms,
            &mut out,
        )
        .unwrap();
        s.topics = out;
        s.rebuild();
        assert_eq!(s.totals.iter().sum::<u32>() as usize, s.docs.len());
    }
    // Even the synchronous (Jacobi-style) sampler improves a random start.
    assert!(s.log_likelihood() > before);
}

#[test]
fn a_word_block_samples_like_the_full_table() {
    // Tokens of words 100..200 only, sampled once against the full word table and once
    // against just those rows with word_base = 100: identical results.
    let k = 12;
    let full = State::planted(params(k, 400), 60, 50, 31);
    let keep: Vec<usize> = (0..full.docs.len())
        .filter(|&i| (100..200).contains(&full.words[i]))
        .collect();
    assert!(keep.len() > 100);
    let docs: Vec<u32> = keep.iter().map(|&i| full.docs[i]).collect();
    let words: Vec<u32> = keep.iter().map(|&i| full.words[i]).collect();
    let tokens = Tokens {
        docs: &docs,
        words: &words,
    };

    let mut a = full.clone();
    let mut topics_a: Vec<u32> = keep.iter().map(|&i| full.topics[i]).collect();
    let counts = CountsMut {
        doc_topic: &mut a.doc_topic,
        word_topic: &mut a.word_topic,
        word_base: 0,
        topic_totals: &mut a.totals,
    };
    gibbs_sweep(
        &a.params,
        tokens,
        &mut topics_a,
        counts,
        &mut FastRng::new(1),
    )
    .unwrap();

    let mut b = full.clone();
    let mut topics_b: Vec<u32> = keep.iter().map(|&i| full.topics[i]).collect();
    let mut block = b.word_topic[100 * k..200 * k].to_vec();
    let counts = CountsMut {
        doc_topic: &mut b.doc_topic,
        word_topic: &mut block,
        word_base: 100,
        topic_totals: &mut b.totals,
    };
    gibbs_sweep(
        &b.params,
        tokens,
        &mut topics_b,
        counts,
        &mut FastRng::new(1),
    )
    .unwrap();

    assert_eq!(topics_a, topics_b);
    assert_eq!(a.doc_topic, b.doc_topic);
    assert_eq!(a.totals, b.totals);
    assert_eq!(&a.word_topic[100 * k..200 * k], &block[..]);
}

#[test]
fn gibbs_sampling_recovers_planted_topics() {
    let mut s = State::planted(params(10, 500), 300, 80, 41);
    let mut rng = FastRng::new(2);
    let start = s.log_likelihood() / s.docs.len() as f64;
    for _ in 0..30 {
        s.sweep(&mut rng, false);
    }
    let end = s.log_likelihood() / s.docs.len() as f64;
    // Random assignments of a planted corpus vs a fitted state: the per-token joint
    // log-likelihood rises by well over a nat.
    assert!(
        end > start + 1.0,
        "per-token log-likelihood {start} -> {end}"
    );
    // Most words end up concentrated in one topic: the dominant topic of each frequent
    // word holds most of its tokens.
    let k = 10;
    let (mut dominant, mut all) = (0u64, 0u64);
    for row in s.word_topic.chunks_exact(k) {
        let total: u32 = row.iter().sum();
        if total >= 20 {
            dominant += u64::from(*row.iter().max().unwrap());
            all += u64::from(total);
        }
    }
    assert!(dominant as f64 > 0.8 * all as f64, "{dominant}/{all}");
}
