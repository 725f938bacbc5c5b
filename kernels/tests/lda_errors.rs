//! Every bad LDA input is reported as the right `KernelError`, without panicking and
//! without touching any output.

use harp_kernels::lda::reference::{gibbs_sweep_reference, sample_parallel_reference};
use harp_kernels::lda::{
    gibbs_sweep, log_likelihood, rebuild_counts, sample_parallel, Counts, CountsMut, FastRng,
    LdaParams, Tokens,
};
use harp_kernels::KernelError;

const P: LdaParams = LdaParams {
    topics: 3,
    vocab: 5,
    alpha: 0.1,
    beta: 0.01,
};

/// Inputs for all four token kernels; counts consistent with the topics unless a test
/// breaks them.
#[derive(Clone)]
struct Case {
    params: LdaParams,
    docs: Vec<u32>,
    words: Vec<u32>,
    topics: Vec<u32>,
    doc_topic: Vec<u32>,
    word_topic: Vec<u32>,
    word_base: u32,
    totals: Vec<u32>,
    uniforms: Vec<f32>,
    new_topics_len: usize,
}

fn good() -> Case {
    // Two documents; tokens (doc, word, topic).
    let docs = vec![0, 0, 1, 1];
    let words = vec![0, 4, 2, 4];
    let topics = vec![0, 2, 1, 2];
    let doc_topic = vec![1, 0, 1, 0, 1, 1];
    let mut word_topic = vec![0; 15];
    word_topic[0] = 1; // word 0, topic 0
    word_topic[4 * 3 + 2] = 2; // word 4, topic 2 (twice)
    word_topic[2 * 3 + 1] = 1; // word 2, topic 1
    Case {
        params: P,
        docs,
        words,
        topics,
        doc_topic,
        word_topic,
        word_base: 0,
        totals: vec![1, 1, 2],
        uniforms: vec![0.1, 0.5, 0.9, 0.0],
        new_topics_len: 4,
    }
}

/// Runs every token kernel on the case: each must return `expected` and leave all
/// buffers unchanged.
fn expect_err(case: Case, expected: KernelError) {
    let c = case.clone();
    let tokens = Tokens {
        docs: &c.docs,
        words: &c.words,
    };
    let counts = Counts {
        doc_topic: &c.doc_topic,
        word_topic: &c.word_topic,
        word_base: c.word_base,
        topic_totals: &c.totals,
    };

    let mut new_topics = vec![77u32; c.new_topics_len];
    // The parallel step only reads the counts and does not check their consistency.
    let skip_parallel = matches!(expected, KernelError::InconsistentCounts { .. });
    let r = sample_parallel(
        &c.params,
        tokens,
        &c.topics,
        counts,
        &c.uniforms,
        &mut new_topics,
    );
    if skip_parallel {
        assert!(r.is_ok(), "sample_parallel: {r:?}");
    } else {
        assert_eq!(r, Err(expected.clone()), "sample_parallel");
        assert!(new_topics.iter().all(|&t| t == 77), "sample_parallel wrote");
    }
    let r = sample_parallel_reference(
        &c.params,
        tokens,
        &c.topics,
        counts,
        &c.uniforms,
        &mut new_topics,
    );
    if !skip_parallel {
        assert_eq!(r, Err(expected.clone()), "sample_parallel_reference");
        assert!(new_topics.iter().all(|&t| t == 77));
    }

    let only_parallel = matches!(
        expected,
        KernelError::InvalidValue { .. }
            | KernelError::LengthMismatch {
                what: "uniforms" | "new_topics",
                ..
            }
    );
    if only_parallel {
        return;
    }
    type Sweep = fn(
        &LdaParams,
        Tokens<'_>,
        &mut [u32],
        CountsMut<'_>,
        &mut FastRng,
    ) -> Result<(), KernelError>;
    let sweeps: [(&str, Sweep); 2] = [
        ("gibbs_sweep", gibbs_sweep),
        ("gibbs_sweep_reference", gibbs_sweep_reference),
    ];
    for (name, sweep) in sweeps {
        let mut m = case.clone();
        let tokens = Tokens {
            docs: &c.docs,
            words: &c.words,
        };
        let counts = CountsMut {
            doc_topic: &mut m.doc_topic,
            word_topic: &mut m.word_topic,
            word_base: m.word_base,
            topic_totals: &mut m.totals,
        };
        let r = sweep(
            &m.params,
            tokens,
            &mut m.topics,
            counts,
            &mut FastRng::new(1),
        );
        assert_eq!(r, Err(expected.clone()), "{name}");
        assert_eq!(
            (&m.topics, &m.doc_topic, &m.word_topic, &m.totals),
            (&c.topics, &c.doc_topic, &c.word_topic, &c.totals),
            "{name} wrote"
        );
    }
    if matches!(expected, KernelError::InconsistentCounts { .. }) {
        return; // rebuild_counts does not read the old counts
    }
    let mut m = case.clone();
    let counts = CountsMut {
        doc_topic: &mut m.doc_topic,
        word_topic: &mut m.word_topic,
        word_base: m.word_base,
        topic_totals: &mut m.totals,
    };
    assert_eq!(
        rebuild_counts(&m.params, tokens, &c.topics, counts),
        Err(expected),
        "rebuild_counts"
    );
    assert_eq!(
        (&m.doc_topic, &m.word_topic, &m.totals),
        (&c.doc_topic, &c.word_topic, &c.totals),
        "rebuild_counts wrote"
    );
}

#[test]
fn the_good_case_is_accepted() {
    let mut c = good();
    let tokens = Tokens {
        docs: &c.docs,
        words: &c.words,
    };
    let counts = CountsMut {
        doc_topic: &mut c.doc_topic,
        word_topic: &mut c.word_topic,
        word_base: 0,
        topic_totals: &mut c.totals,
    };
    gibbs_sweep(
        &c.params,
        tokens,
        &mut c.topics,
        counts,
        &mut FastRng::new(3),
    )
    .unwrap();
    assert_eq!(c.totals.iter().sum::<u32>(), 4);
}

#[test]
fn bad_hyperparameters() {
    let with = |f: fn(&mut LdaParams)| {
        let mut c = good();
        f(&mut c.params);
        c
    };
    expect_err(
        with(|p| p.topics = 0),
        KernelError::ZeroDimension { what: "topics" },
    );
    expect_err(
        with(|p| p.vocab = 0),
        KernelError::ZeroDimension { what: "vocab" },
    );
    for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let mut c = good();
        c.params.alpha = bad;
        let e = sample_parallel(
            &c.params,
            Tokens {
                docs: &c.docs,
                words: &c.words,
            },
            &c.topics,
            Counts {
                doc_topic: &c.doc_topic,
                word_topic: &c.word_topic,
                word_base: 0,
                topic_totals: &c.totals,
            },
            &c.uniforms,
            &mut [0; 4],
        );
        assert!(matches!(
            e,
            Err(KernelError::InvalidHyperparameter { what: "alpha", .. })
        ));
        let mut c = good();
        c.params.beta = bad;
        assert!(matches!(
            c.params.validate(),
            Err(KernelError::InvalidHyperparameter { what: "beta", .. })
        ));
    }
    // V·β overflowing f32.
    let p = LdaParams {
        vocab: usize::MAX,
        beta: f32::MAX,
        ..P
    };
    assert!(matches!(
        p.validate(),
        Err(KernelError::InvalidHyperparameter {
            what: "vocab * beta",
            ..
        })
    ));
}

#[test]
fn mismatched_lengths() {
    let mismatch = |what, expected, actual| KernelError::LengthMismatch {
        what,
        expected,
        actual,
    };
    let mut c = good();
    c.words.pop();
    expect_err(c, mismatch("words", 4, 3));
    let mut c = good();
    c.topics.push(0);
    expect_err(c, mismatch("topics", 4, 5));
    let mut c = good();
    c.totals.pop();
    expect_err(c, mismatch("topic_totals", 3, 2));
    let mut c = good();
    c.doc_topic.push(0);
    expect_err(c, mismatch("doc_topic", 6, 7));
    let mut c = good();
    c.word_topic.truncate(14);
    expect_err(c, mismatch("word_topic", 12, 14));
    let mut c = good();
    c.uniforms.pop();
    expect_err(c, mismatch("uniforms", 4, 3));
    let mut c = good();
    c.new_topics_len = 5;
    expect_err(c, mismatch("new_topics", 4, 5));
}

#[test]
fn ids_out_of_range() {
    let oor = |what, position, index| KernelError::IndexOutOfRange {
        what,
        position,
        index,
    };
    let mut c = good();
    c.docs[2] = 2; // only two document rows
    expect_err(c, oor("docs", 2, 2));
    let mut c = good();
    c.words[1] = 5; // V = 5
    expect_err(c, oor("words", 1, 5));
    let mut c = good();
    c.topics[3] = 3; // K = 3
    expect_err(c, oor("topics", 3, 3));

    // A word id below V but beyond the word_topic rows passed.
    let mut c = good();
    c.word_topic.truncate(9); // words 0..3 only
    c.words = vec![0, 3, 2, 1];
    expect_err(c, oor("words", 1, 3));

    // A block of words 2..5: word 0 is below the block.
    let mut c = good();
    c.word_base = 2;
    c.word_topic = c.word_topic[6..].to_vec();
    expect_err(c, oor("words", 0, 0));

    // A word id beyond V even though the block has rows for it.
    let mut c = good();
    c.params.vocab = 4;
    expect_err(c, oor("words", 1, 4));
}

#[test]
fn bad_uniforms() {
    for (bad, at) in [(1.0, 0), (-0.1, 2), (f32::NAN, 3)] {
        let mut c = good();
        c.uniforms[at] = bad;
        expect_err(
            c,
            KernelError::InvalidValue {
                what: "uniforms",
                position: at,
            },
        );
    }
}

#[test]
fn counts_that_miss_an_assignment() {
    // Token 0's assignment (doc 0, word 0, topic 0) is not in the word counts.
    let mut c = good();
    c.word_topic[0] = 0;
    c.word_topic[1] = 1;
    expect_err(c, KernelError::InconsistentCounts { position: 0 });
}

#[test]
fn inconsistency_found_mid_sweep_stops_there() {
    // Token 2 (document 1, topic 1) is missing from its document's counts; tokens 0
    // and 1 (document 0) are resampled, tokens 2 and 3 stay untouched.
    let mut c = good();
    c.doc_topic = vec![1, 0, 1, 0, 0, 2];
    let tokens = Tokens {
        docs: &c.docs,
        words: &c.words,
    };
    let counts = CountsMut {
        doc_topic: &mut c.doc_topic,
        word_topic: &mut c.word_topic,
        word_base: 0,
        topic_totals: &mut c.totals,
    };
    let r = gibbs_sweep(
        &c.params,
        tokens,
        &mut c.topics,
        counts,
        &mut FastRng::new(1),
    );
    assert_eq!(r, Err(KernelError::InconsistentCounts { position: 2 }));
    assert_eq!(&c.topics[2..], &[1, 2]);
    assert_eq!(&c.doc_topic[3..], &[0, 0, 2], "document 1 untouched");
    assert_eq!(
        c.totals.iter().sum::<u32>(),
        4,
        "tokens 0 and 1 are still counted"
    );
    assert_eq!(c.doc_topic[..3].iter().sum::<u32>(), 2);
}

#[test]
fn likelihood_shapes() {
    let c = good();
    assert!(log_likelihood(&c.params, &c.doc_topic, &c.word_topic, &c.totals).is_ok());
    assert!(matches!(
        log_likelihood(&c.params, &c.doc_topic[..5], &c.word_topic, &c.totals),
        Err(KernelError::LengthMismatch {
            what: "doc_topic",
            ..
        })
    ));
    assert!(matches!(
        log_likelihood(&c.params, &c.doc_topic, &c.word_topic[..4], &c.totals),
        Err(KernelError::LengthMismatch {
            what: "word_topic",
            ..
        })
    ));
    assert!(matches!(
        log_likelihood(&c.params, &c.doc_topic, &c.word_topic, &c.totals[..2]),
        Err(KernelError::LengthMismatch {
            what: "topic_totals",
            ..
        })
    ));
}
