//! `ln_gamma` is accurate, and the joint log-likelihood equals the Dirichlet-multinomial
//! closed form computed independently.

use harp_kernels::lda::{
    ln_gamma, log_likelihood, log_likelihood_docs, log_likelihood_topics, log_likelihood_words,
    FastRng, LdaParams,
};

#[test]
fn ln_gamma_known_values() {
    let pi = std::f64::consts::PI;
    let cases = [
        (1.0, 0.0),
        (2.0, 0.0),
        (0.5, 0.5 * pi.ln()),
        (1.5, (0.5 * pi.sqrt()).ln()),
        (3.0, 2.0f64.ln()),
        (10.0, 362_880.0f64.ln()),
        // Values from Abramowitz & Stegun / high-precision tables.
        (0.1, 2.252_712_651_734_206),
        (0.01, 4.599_479_878_042_022),
        (100.0, 359.134_205_369_575_4),
        (1e6, 12_815_504.569_147_61),
    ];
    for (x, want) in cases {
        let got = ln_gamma(x);
        assert!(
            (got - want).abs() <= 1e-13 * (1.0 + want.abs()),
            "lnΓ({x}) = {got}, want {want}"
        );
    }
    assert!(ln_gamma(0.0).is_nan());
    assert!(ln_gamma(-1.5).is_nan());
    assert!(ln_gamma(f64::NAN).is_nan());
    assert_eq!(ln_gamma(f64::INFINITY), f64::INFINITY);
}

#[test]
fn ln_gamma_matches_factorials_and_the_recurrence() {
    // lnΓ(n) = ln((n-1)!) summed exactly enough in f64.
    let mut ln_fact = 0.0f64;
    for n in 1..=170u32 {
        let got = ln_gamma(f64::from(n));
        assert!(
            (got - ln_fact).abs() <= 1e-12 * (1.0 + ln_fact),
            "n={n}: {got} vs {ln_fact}"
        );
        ln_fact += f64::from(n).ln();
    }
    // lnΓ(x+1) − lnΓ(x) = ln x across scales.
    let mut rng = FastRng::new(1);
    for _ in 0..10_000 {
        let x = 10f64.powf(rng.next_f64() * 8.0 - 3.0); // 1e-3 .. 1e5
        let diff = ln_gamma(x + 1.0) - ln_gamma(x);
        let scale = 1.0 + ln_gamma(x).abs();
        assert!(
            (diff - x.ln()).abs() <= 1e-13 * scale,
            "x={x}: {diff} vs {}",
            x.ln()
        );
    }
}

/// ln(n!) by summation.
fn ln_fact(n: u32) -> f64 {
    (2..=n).map(|j| f64::from(j).ln()).sum()
}

#[test]
fn joint_equals_the_closed_form_for_unit_priors() {
    // With α = β = 1 every Gamma is a factorial:
    // p(z) per doc = (K-1)! Π n_dk! / (n_d + K - 1)!,
    // p(w|z) per topic = (V-1)! Π n_wk! / (n_k + V - 1)!.
    let (k, v) = (3usize, 4usize);
    let params = LdaParams {
        topics: k,
        vocab: v,
        alpha: 1.0,
        beta: 1.0,
    };
    let doc_topic = [2u32, 0, 1, 0, 3, 4, 0, 0, 0]; // third document empty
    let word_topic = [1u32, 1, 0, 0, 2, 3, 1, 0, 1, 0, 0, 1]; // V×K
    let totals: Vec<u32> = (0..k)
        .map(|j| (0..v).map(|w| word_topic[w * k + j]).sum())
        .collect();
    assert_eq!(
        totals,
        (0..k)
            .map(|j| (0..3).map(|d| doc_topic[d * k + j]).sum())
            .collect::<Vec<u32>>()
    );

    let mut want_docs = 0.0;
    for row in doc_topic.chunks(k) {
        let n: u32 = row.iter().sum();
        want_docs += ln_fact(k as u32 - 1) - ln_fact(n + k as u32 - 1);
        want_docs += row.iter().map(|&c| ln_fact(c)).sum::<f64>();
    }
    let mut want_words = 0.0;
    for j in 0..k {
        want_words += ln_fact(v as u32 - 1) - ln_fact(totals[j] + v as u32 - 1);
        want_words += (0..v).map(|w| ln_fact(word_topic[w * k + j])).sum::<f64>();
    }
    let got = log_likelihood(&params, &doc_topic, &word_topic, &totals).unwrap();
    assert!(
        (got - (want_docs + want_words)).abs() < 1e-10,
        "{got} vs {}",
        want_docs + want_words
    );
    let docs = log_likelihood_docs(&params, &doc_topic).unwrap();
    assert!((docs - want_docs).abs() < 1e-10);
    let words = log_likelihood_words(&params, &word_topic).unwrap()
        + log_likelihood_topics(&params, &totals).unwrap();
    assert!((words - want_words).abs() < 1e-10);
}

#[test]
fn word_part_adds_up_over_blocks_and_counts_of_any_size() {
    // General priors, counts large enough to leave the small-count table.
    let params = LdaParams {
        topics: 5,
        vocab: 40,
        alpha: 0.3,
        beta: 0.02,
    };
    let mut rng = FastRng::new(9);
    let word_topic: Vec<u32> = (0..200)
        .map(|_| match rng.below(3) {
            0 => 0,
            1 => rng.below(60),
            _ => rng.below(5000),
        })
        .collect();
    let whole = log_likelihood_words(&params, &word_topic).unwrap();
    let blocks: f64 = word_topic
        .chunks(5 * 8)
        .map(|b| log_likelihood_words(&params, b).unwrap())
        .sum();
    assert!((whole - blocks).abs() <= 1e-9 * whole.abs());
    // Direct formula.
    let beta = f64::from(params.beta);
    let direct: f64 = word_topic
        .iter()
        .map(|&n| ln_gamma(f64::from(n) + beta) - ln_gamma(beta))
        .sum();
    assert!(
        (whole - direct).abs() <= 1e-9 * direct.abs(),
        "{whole} vs {direct}"
    );
}
