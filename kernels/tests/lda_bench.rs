//! Micro-benchmark of the sequential Gibbs sweep (ignored by default). Run with
//! `cargo test --release -p harp-kernels --test lda_bench -- --ignored --nocapture`;
//! prints tokens per second on one core for K = 20, 100 and 1000.

use harp_kernels::lda::{
    gibbs_sweep, rebuild_counts, sample_parallel, Counts, CountsMut, FastRng, LdaParams, Tokens,
};
use std::time::Instant;

/// Nanoseconds this thread has spent on a CPU (Linux `/proc/thread-self/schedstat`),
/// so the figure is meaningful on a shared, oversubscribed machine; `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Runs `f`, returning (wall seconds, on-CPU seconds if known).
fn timed(f: impl FnOnce()) -> (f64, Option<f64>) {
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    f();
    let wall = start.elapsed().as_secs_f64();
    let cpu = match (cpu0, thread_cpu_ns()) {
        (Some(a), Some(b)) => Some((b - a) as f64 * 1e-9),
        _ => None,
    };
    (wall, cpu)
}

fn report(what: &str, tokens: usize, (wall, cpu): (f64, Option<f64>)) {
    let on_cpu = cpu
        .map(|c| {
            format!(
                ", {:.2} M tokens/s per on-CPU second",
                tokens as f64 / c / 1e6
            )
        })
        .unwrap_or_default();
    println!(
        "{what}: {:.2} M tokens/s wall{on_cpu}",
        tokens as f64 / wall / 1e6
    );
}

/// `docs` documents of 100 tokens over a Zipf(1)-distributed vocabulary of `vocab`
/// words, each document mostly from 3 of K planted topics; random initial topics.
fn corpus(k: usize, vocab: usize, docs: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut rng = FastRng::new(42);
    // Zipf CDF over ranks.
    let weights: Vec<f64> = (1..=vocab).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(vocab);
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cdf.push(acc);
    }
    let (mut d_ids, mut w_ids, mut z) = (vec![], vec![], vec![]);
    for d in 0..docs {
        let themes = [
            rng.below(k as u32),
            rng.below(k as u32),
            rng.below(k as u32),
        ];
        for _ in 0..100 {
            let t = themes[rng.below(3) as usize];
            let rank = cdf.partition_point(|&c| c < rng.next_f64()).min(vocab - 1);
            // Each topic permutes the vocabulary differently.
            let w = (rank as u64 * 2_654_435_761 + u64::from(t) * 7919) % vocab as u64;
            d_ids.push(d as u32);
            w_ids.push(w as u32);
            z.push(rng.below(k as u32));
        }
    }
    (d_ids, w_ids, z)
}

#[test]
#[ignore]
fn sweep_tokens_per_second() {
    for (k, sweeps) in [(20usize, 10), (100, 4), (1000, 1)] {
        let (vocab, n_docs) = (10_000usize, 10_000usize);
        let params = LdaParams {
            topics: k,
            vocab,
            alpha: 0.1,
            beta: 0.01,
        };
        let (docs, words, mut topics) = corpus(k, vocab, n_docs);
        let tokens = Tokens {
            docs: &docs,
            words: &words,
        };
        let mut doc_topic = vec![0u32; n_docs * k];
        let mut word_topic = vec![0u32; vocab * k];
        let mut totals = vec![0u32; k];
        macro_rules! counts {
            () => {
                CountsMut {
                    doc_topic: &mut doc_topic,
                    word_topic: &mut word_topic,
                    word_base: 0,
                    topic_totals: &mut totals,
                }
            };
        }
        rebuild_counts(&params, tokens, &topics, counts!()).unwrap();
        let mut rng = FastRng::new(1);
        gibbs_sweep(&params, tokens, &mut topics, counts!(), &mut rng).unwrap(); // warm-up
        let t = timed(|| {
            for _ in 0..sweeps {
                gibbs_sweep(&params, tokens, &mut topics, counts!(), &mut rng).unwrap();
            }
        });
        report(
            &format!("gibbs_sweep K={k:4} V={vocab} tokens={}", docs.len()),
            sweeps * docs.len(),
            t,
        );

        let uniforms: Vec<f32> = (0..docs.len()).map(|_| rng.next_f32()).collect();
        let mut out = vec![0u32; docs.len()];
        let view = Counts {
            doc_topic: &doc_topic,
            word_topic: &word_topic,
            word_base: 0,
            topic_totals: &totals,
        };
        let t = timed(|| {
            sample_parallel(&params, tokens, &topics, view, &uniforms, &mut out).unwrap();
        });
        report(
            &format!("sample_parallel (CPU conformance version) K={k:4}"),
            docs.len(),
            t,
        );
    }
}
