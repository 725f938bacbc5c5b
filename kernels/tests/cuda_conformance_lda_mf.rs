//! CUDA conformance for the LDA and MF kernels: each GPU kernel agrees with its CPU
//! version and refuses bad input with the CPU's error, writing nothing.
//!
//! Tolerances:
//! * LDA parallel sampling step: every GPU variant performs the CPU version's f32
//!   operations in the same order with explicitly rounded intrinsics, so topics must be
//!   identical for every token (all four kernels, `K` from 1 to 5000); count rebuilds
//!   must be exactly equal; generated uniforms equal their host twin bit for bit;
//! * SGD on batches without repeated users or items (so the Hogwild kernel has no
//!   races and order does not matter): `|gpu − cpu| <= 1e-4 (1 + |cpu|)`;
//! * ALS half-step: per row, `|gpu − cpu| <= 1e-3 · max(‖cpu row‖∞, 1e-3)`.
//!
//! Without a CUDA device every case prints `skipped: no CUDA device (<reason>)` and
//! passes (see `cuda_common`; `HARP_REQUIRE_GPU=1` turns that into a failure). The
//! host-only cases (variant choice, the uniform generator's host twin) always run.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::assert_close;
use harp_kernels::cuda::cudarc::driver::CudaSlice;
use harp_kernels::cuda::lda::{
    self as gpu_lda, counter_uniform, sample_variant, sample_variants, DeviceCounts,
    DeviceCountsMut, DeviceTokens, DeviceTopics, DeviceUniforms, SampleVariant,
};
use harp_kernels::cuda::mf::{self as gpu_mf, DeviceCsr, DeviceRatings, ALS_MAX_RANK};
use harp_kernels::cuda::Gpu;
use harp_kernels::lda::{
    rebuild_counts, sample_parallel, Counts, CountsMut, FastRng, LdaParams, Tokens,
};
use harp_kernels::mf::{als_half_step, sgd_step, Csr, Ratings, Sgd};
use harp_kernels::KernelError;

// ---------------------------------------------------------------------------------
// LDA

/// A random LDA state: tokens over `docs` documents and a block of `rows` words
/// starting at `base`, random topics, consistent counts.
struct Lda {
    params: LdaParams,
    docs: Vec<u32>,
    words: Vec<u32>,
    topics: Vec<u32>,
    doc_topic: Vec<u32>,
    word_topic: Vec<u32>,
    base: u32,
    totals: Vec<u32>,
    uniforms: Vec<f32>,
}

fn lda_state(k: usize, n: usize, docs: usize, rows: usize, base: u32, seed: u64) -> Lda {
    let mut rng = FastRng::new(seed);
    let params = LdaParams {
        topics: k,
        vocab: base as usize + rows + 7,
        alpha: 0.1,
        beta: 0.01,
    };
    // Skewed topics so distributions are far from uniform.
    let docs_v: Vec<u32> = (0..n).map(|_| rng.below(docs as u32)).collect();
    let words: Vec<u32> = (0..n).map(|_| base + rng.below(rows as u32)).collect();
    let topics: Vec<u32> = (0..n)
        .map(|_| (rng.next_f32().powi(3) * k as f32) as u32 % k as u32)
        .collect();
    let uniforms: Vec<f32> = (0..n).map(|_| rng.next_f32()).collect();
    let mut s = Lda {
        params,
        docs: docs_v,
        words,
        topics,
        doc_topic: vec![0; docs * k],
        word_topic: vec![0; rows * k],
        base,
        totals: vec![0; k],
        uniforms,
    };
    recount(&mut s);
    s
}

/// Rebuilds the CPU state's counts from its topics.
fn recount(s: &mut Lda) {
    let tokens = Tokens {
        docs: &s.docs,
        words: &s.words,
    };
    let counts = CountsMut {
        doc_topic: &mut s.doc_topic,
        word_topic: &mut s.word_topic,
        word_base: s.base,
        topic_totals: &mut s.totals,
    };
    rebuild_counts(&s.params, tokens, &s.topics, counts).unwrap();
}

/// Device copies of an LDA state.
struct DevLda {
    tokens: DeviceTokens,
    topics: DeviceTopics,
    doc_topic: CudaSlice<u32>,
    word_topic: CudaSlice<u32>,
    totals: CudaSlice<u32>,
    uniforms: DeviceUniforms,
}

impl DevLda {
    fn counts(&self, base: u32) -> DeviceCounts<'_> {
        DeviceCounts {
            doc_topic: &self.doc_topic,
            word_topic: &self.word_topic,
            word_base: base,
            topic_totals: &self.totals,
        }
    }
}

fn upload(gpu: &Gpu, s: &Lda) -> DevLda {
    DevLda {
        tokens: DeviceTokens::upload(
            gpu,
            Tokens {
                docs: &s.docs,
                words: &s.words,
            },
        )
        .unwrap(),
        topics: DeviceTopics::upload(gpu, &s.topics).unwrap(),
        doc_topic: gpu.upload(&s.doc_topic).unwrap(),
        word_topic: gpu.upload(&s.word_topic).unwrap(),
        totals: gpu.upload(&s.totals).unwrap(),
        uniforms: DeviceUniforms::upload(gpu, &s.uniforms).unwrap(),
    }
}

/// An output buffer full of `u32::MAX` (so a write is visible).
fn poisoned(gpu: &Gpu, n: usize) -> DeviceTopics {
    DeviceTopics::upload(gpu, &vec![u32::MAX; n]).unwrap()
}

fn gpu_sample(gpu: &Gpu, s: &Lda, d: &DevLda) -> Result<Vec<u32>, KernelError> {
    gpu_sample_with(sample_variant(s.params.topics), gpu, s, d)
}

fn gpu_sample_with(
    variant: SampleVariant,
    gpu: &Gpu,
    s: &Lda,
    d: &DevLda,
) -> Result<Vec<u32>, KernelError> {
    let mut out = poisoned(gpu, s.docs.len());
    sample_into(variant, gpu, s, d, &mut out)?;
    assert_eq!(out.bound(), s.params.topics as u64);
    Ok(out.download(gpu).unwrap())
}

/// One sampling step of `s` (uploaded as `d`) with kernel `variant` into `out`.
fn sample_into(
    variant: SampleVariant,
    gpu: &Gpu,
    s: &Lda,
    d: &DevLda,
    out: &mut DeviceTopics,
) -> Result<(), KernelError> {
    gpu_lda::sample_parallel_with(
        variant,
        gpu,
        &s.params,
        &d.tokens,
        &d.topics,
        d.counts(s.base),
        &d.uniforms,
        out,
    )
}

fn cpu_sample(s: &Lda) -> Result<Vec<u32>, KernelError> {
    let mut out = vec![u32::MAX; s.docs.len()];
    sample_parallel(
        &s.params,
        Tokens {
            docs: &s.docs,
            words: &s.words,
        },
        &s.topics,
        Counts {
            doc_topic: &s.doc_topic,
            word_topic: &s.word_topic,
            word_base: s.base,
            topic_totals: &s.totals,
        },
        &s.uniforms,
        &mut out,
    )?;
    Ok(out)
}

/// Asserts the two topic vectors are identical, naming the first difference.
fn assert_same_topics(what: &str, gpu: &[u32], cpu: &[u32]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths differ");
    if let Some(i) = gpu.iter().zip(cpu).position(|(a, b)| a != b) {
        let same = gpu.iter().zip(cpu).filter(|(a, b)| a == b).count();
        panic!(
            "{what}: token {i}: GPU topic {} vs CPU {} ({same}/{} identical)",
            gpu[i],
            cpu[i],
            cpu.len()
        );
    }
}

#[test]
fn sample_variant_follows_k() {
    use SampleVariant::*;
    for (k, want) in [
        (1, ThreadPerToken),
        (32, ThreadPerToken),
        (33, ChunkedTiles { warps_per_block: 8 }),
        (100, ChunkedTiles { warps_per_block: 3 }),
        (112, ChunkedTiles { warps_per_block: 3 }),
        (113, WarpRegisters),
        (128, WarpRegisters),
        (256, WarpRegisters),
        (257, WarpShared { warps_per_block: 8 }),
        (2500, WarpShared { warps_per_block: 2 }),
        (5000, WarpRecompute),
    ] {
        assert_eq!(sample_variant(k), want, "K={k}");
    }
    // The alternatives a test or benchmark may launch instead, the default first.
    for (k, want) in [
        (20, vec![ThreadPerToken, WarpRecompute]),
        (
            100,
            vec![
                ChunkedTiles { warps_per_block: 3 },
                LeanTiles { warps_per_block: 3 },
                LeanTiles16 { warps_per_block: 7 },
                WarpRegisters,
                WarpRecompute,
            ],
        ),
        (
            256,
            vec![
                WarpRegisters,
                ChunkedTiles { warps_per_block: 1 },
                LeanTiles { warps_per_block: 1 },
                LeanTiles16 { warps_per_block: 2 },
                WarpRecompute,
            ],
        ),
        (
            33,
            vec![
                ChunkedTiles { warps_per_block: 8 },
                LeanTiles { warps_per_block: 8 },
                LeanTiles16 { warps_per_block: 8 },
                WarpRegisters,
                WarpRecompute,
            ],
        ),
        (1024, vec![WarpShared { warps_per_block: 8 }, WarpRecompute]),
    ] {
        assert_eq!(sample_variants(k), want, "K={k}");
    }
    // Larger K never returns to a shared-memory variant.
    let mut recompute = false;
    for k in 257..20_000 {
        let v = sample_variant(k);
        assert!(!recompute || v == SampleVariant::WarpRecompute, "K={k}");
        recompute = v == SampleVariant::WarpRecompute;
    }
}

#[test]
fn counter_uniforms_are_in_unit_interval_and_spread() {
    for seed in [0u64, 1, 0xdead_beef, u64::MAX] {
        let u: Vec<f32> = (0..100_000).map(|i| counter_uniform(seed, i)).collect();
        assert!(u.iter().all(|x| (0.0..1.0).contains(x)), "seed {seed}");
        // Multiples of 2^-24.
        assert!(u.iter().all(|x| (x * 16_777_216.0).fract() == 0.0));
        let mean = u.iter().map(|&x| f64::from(x)).sum::<f64>() / u.len() as f64;
        assert!((mean - 0.5).abs() < 0.01, "seed {seed}: mean {mean}");
        // Ten equal bins, each within 5% of its expected 10 000.
        let mut bins = [0usize; 10];
        for &x in &u {
            bins[(x * 10.0) as usize] += 1;
        }
        assert!(
            bins.iter().all(|&b| b.abs_diff(10_000) < 500),
            "seed {seed}: {bins:?}"
        );
    }
    assert_ne!(counter_uniform(1, 5), counter_uniform(2, 5));
    assert_eq!(counter_uniform(7, 123), counter_uniform(7, 123));
}

#[test]
fn lda_parallel_step_matches_cpu() {
    let gpu = gpu_or_skip!();
    // Every variant, tile tails (n not a multiple of 32, n < 32), word blocks not at 0, and
    // every width of a last partial chunk of topics (K % 32 of 1, 4, 8, 12, 26 and 0).
    let cases = [
        (1usize, 1000usize, 10usize, 50usize, 0u32),
        (7, 5000, 40, 300, 0),
        (20, 5, 3, 10, 2),
        (20, 33, 5, 10, 0),
        (20, 200_000, 2000, 5000, 0),
        (32, 50_000, 500, 1000, 123),
        (33, 50_000, 500, 1000, 0),
        (40, 20_011, 300, 500, 3),
        (65, 10_007, 100, 200, 0),
        (76, 20_000, 300, 500, 0),
        (90, 9_999, 200, 400, 11),
        (100, 100_000, 1000, 3000, 4000),
        (128, 30_000, 400, 600, 7),
        (256, 20_000, 300, 500, 0),
        (257, 20_000, 300, 500, 1),
        (1024, 20_000, 200, 500, 0),
        (2500, 5000, 50, 200, 9),
        (5000, 2000, 20, 100, 0),
    ];
    let mut seen = Vec::new();
    for (case, &(k, n, docs, rows, base)) in cases.iter().enumerate() {
        let s = lda_state(k, n, docs, rows, base, 300 + case as u64);
        let d = upload(gpu, &s);
        let c = cpu_sample(&s).unwrap();
        // The default kernel and every alternative that can sample K.
        for variant in sample_variants(k) {
            let g = gpu_sample_with(variant, gpu, &s, &d).unwrap();
            println!("LDA K={k} n={n} ({variant:?}): identical topics");
            assert_same_topics(&format!("K={k} n={n} {variant:?}"), &g, &c);
            seen.push(std::mem::discriminant(&variant));
        }
    }
    for v in [
        SampleVariant::ThreadPerToken,
        SampleVariant::ChunkedTiles { warps_per_block: 1 },
        SampleVariant::LeanTiles { warps_per_block: 1 },
        SampleVariant::LeanTiles16 { warps_per_block: 1 },
        SampleVariant::WarpRegisters,
        SampleVariant::WarpShared { warps_per_block: 1 },
        SampleVariant::WarpRecompute,
    ] {
        assert!(
            seen.contains(&std::mem::discriminant(&v)),
            "{v:?} not covered"
        );
    }
}

#[test]
fn lda_generated_uniforms_match_host_twin() {
    let gpu = gpu_or_skip!();
    let n = 1_000_003;
    let mut u = DeviceUniforms::generate(gpu, n, 42).unwrap();
    let host: Vec<f32> = (0..n as u64).map(|i| counter_uniform(42, i)).collect();
    assert_eq!(gpu.download(u.as_slice()).unwrap(), host);
    u.regenerate(gpu, 43).unwrap();
    let host: Vec<f32> = (0..n as u64).map(|i| counter_uniform(43, i)).collect();
    assert_eq!(gpu.download(u.as_slice()).unwrap(), host);
    assert!(DeviceUniforms::generate(gpu, 0, 1).unwrap().is_empty());

    // Sampling with generated uniforms equals the CPU with the host twin's.
    for k in [20usize, 100] {
        let mut s = lda_state(k, 30_000, 300, 800, 0, 8);
        s.uniforms = (0..s.docs.len() as u64)
            .map(|i| counter_uniform(99, i))
            .collect();
        let mut d = upload(gpu, &s);
        d.uniforms = DeviceUniforms::generate(gpu, s.docs.len(), 99).unwrap();
        let g = gpu_sample(gpu, &s, &d).unwrap();
        assert_same_topics(
            &format!("generated uniforms, K={k}"),
            &g,
            &cpu_sample(&s).unwrap(),
        );
    }
}

/// Tokens and topics built from device buffers behave as uploaded ones, and a chain of
/// steps stays on the device: sample, rebuild the counts from the new topics, sample
/// again from those, equal to the same chain on the CPU.
#[test]
fn lda_device_built_inputs_and_chained_steps_match_cpu() {
    let gpu = gpu_or_skip!();
    for k in [16usize, 64, 300] {
        let mut s = lda_state(k, 40_000, 400, 900, 30, 21);
        let tokens = DeviceTokens::from_device(
            gpu,
            gpu.upload(&s.docs).unwrap(),
            gpu.upload(&s.words).unwrap(),
        )
        .unwrap();
        let uploaded = DeviceTokens::upload(
            gpu,
            Tokens {
                docs: &s.docs,
                words: &s.words,
            },
        )
        .unwrap();
        assert_eq!(tokens.doc_rows_needed(), uploaded.doc_rows_needed());
        assert_eq!(tokens.word_span(), uploaded.word_span());
        let topics = DeviceTopics::from_device(gpu, gpu.upload(&s.topics).unwrap()).unwrap();
        assert_eq!(
            topics.bound(),
            DeviceTopics::upload(gpu, &s.topics).unwrap().bound()
        );
        let mut d = upload(gpu, &s);
        d.tokens = tokens;
        d.topics = topics;

        for step in 0..2u64 {
            d.uniforms = DeviceUniforms::generate(gpu, s.docs.len(), step).unwrap();
            s.uniforms = (0..s.docs.len() as u64)
                .map(|i| counter_uniform(step, i))
                .collect();
            let mut out = DeviceTopics::zeros(gpu, s.docs.len()).unwrap();
            gpu_lda::sample_parallel(
                gpu,
                &s.params,
                &d.tokens,
                &d.topics,
                d.counts(s.base),
                &d.uniforms,
                &mut out,
            )
            .unwrap();
            s.topics = cpu_sample(&s).unwrap();
            d.topics = out;
            gpu_lda::rebuild_counts(
                gpu,
                &s.params,
                &d.tokens,
                &d.topics,
                DeviceCountsMut {
                    doc_topic: &mut d.doc_topic,
                    word_topic: &mut d.word_topic,
                    word_base: s.base,
                    topic_totals: &mut d.totals,
                },
            )
            .unwrap();
            recount(&mut s);
            let what = format!("K={k} step {step}");
            assert_same_topics(&what, &d.topics.download(gpu).unwrap(), &s.topics);
            assert_eq!(gpu.download(&d.doc_topic).unwrap(), s.doc_topic, "{what}");
            assert_eq!(gpu.download(&d.word_topic).unwrap(), s.word_topic, "{what}");
            assert_eq!(gpu.download(&d.totals).unwrap(), s.totals, "{what}");
        }
    }
}

#[test]
fn lda_rebuild_counts_matches_cpu() {
    let gpu = gpu_or_skip!();
    // K = 20 uses the shared-memory totals histogram, K = 5000 global atomics.
    for (case, &(k, n)) in [(20usize, 300_000usize), (5000, 40_000), (3, 0)]
        .iter()
        .enumerate()
    {
        let mut s = lda_state(k, n, 700, 900, 11, 500 + case as u64);
        // New random topics: the rebuilt counts must describe these.
        let mut rng = FastRng::new(9);
        for t in &mut s.topics {
            *t = rng.below(k as u32);
        }
        let mut d = upload(gpu, &s);
        gpu_lda::rebuild_counts(
            gpu,
            &s.params,
            &d.tokens,
            &d.topics,
            DeviceCountsMut {
                doc_topic: &mut d.doc_topic,
                word_topic: &mut d.word_topic,
                word_base: s.base,
                topic_totals: &mut d.totals,
            },
        )
        .unwrap();
        recount(&mut s);
        assert_eq!(gpu.download(&d.doc_topic).unwrap(), s.doc_topic, "K={k}");
        assert_eq!(gpu.download(&d.word_topic).unwrap(), s.word_topic, "K={k}");
        assert_eq!(gpu.download(&d.totals).unwrap(), s.totals, "K={k}");
    }
}

#[test]
fn an_lda_kernel_that_cannot_sample_k_is_refused_and_writes_nothing() {
    let gpu = gpu_or_skip!();
    for (k, variant) in [
        (100usize, SampleVariant::ThreadPerToken),
        (20, SampleVariant::WarpRegisters),
        (300, SampleVariant::ChunkedTiles { warps_per_block: 1 }),
        (300, SampleVariant::LeanTiles { warps_per_block: 1 }),
        (20, SampleVariant::LeanTiles { warps_per_block: 8 }),
        (300, SampleVariant::LeanTiles16 { warps_per_block: 1 }),
        (20, SampleVariant::LeanTiles16 { warps_per_block: 8 }),
        (300, SampleVariant::WarpRegisters),
        // Sound for K = 100, but not the shape sample_variants(100) plans.
        (100, SampleVariant::ChunkedTiles { warps_per_block: 8 }),
    ] {
        let s = lda_state(k, 500, 20, 50, 0, 5);
        let d = upload(gpu, &s);
        let mut out = poisoned(gpu, s.docs.len());
        let got = sample_into(variant, gpu, &s, &d, &mut out);
        assert!(
            matches!(got, Err(KernelError::InvalidShape { what: "topics", .. })),
            "K={k} {variant:?}: {got:?}"
        );
        assert!(
            out.download(gpu).unwrap().iter().all(|&t| t == u32::MAX),
            "K={k} {variant:?}: wrote topics"
        );
    }
}

#[test]
fn lda_refuses_bad_input_like_cpu() {
    let gpu = gpu_or_skip!();
    type Breaker = fn(&mut Lda);
    let breakers: [(&str, Breaker); 5] = [
        ("doc row", |s| s.docs[1500] = 30),
        ("word above the block", |s| s.words[700] = 150),
        ("word below the block", |s| s.words[900] = 49),
        ("topic", |s| s.topics[3] = 8),
        ("two kinds: doc wins", |s| {
            s.topics[10] = 99;
            s.docs[1999] = 1000;
        }),
    ];
    for (name, breaker) in breakers {
        let mut s = lda_state(8, 2000, 30, 100, 50, 77);
        breaker(&mut s);
        let want = cpu_sample(&s).unwrap_err();
        let d = upload(gpu, &s);
        let mut out = poisoned(gpu, s.docs.len());
        let got = sample_into(sample_variant(8), gpu, &s, &d, &mut out);
        assert_eq!(got, Err(want.clone()), "{name}");
        assert!(
            out.download(gpu).unwrap().iter().all(|&t| t == u32::MAX),
            "{name}: new_topics written on error"
        );
        // The count rebuild refuses the same input, leaving the tables alone.
        let mut d = d;
        let got = gpu_lda::rebuild_counts(
            gpu,
            &s.params,
            &d.tokens,
            &d.topics,
            DeviceCountsMut {
                doc_topic: &mut d.doc_topic,
                word_topic: &mut d.word_topic,
                word_base: s.base,
                topic_totals: &mut d.totals,
            },
        );
        assert_eq!(got, Err(want), "{name} (rebuild)");
        assert_eq!(gpu.download(&d.doc_topic).unwrap(), s.doc_topic, "{name}");
        assert_eq!(gpu.download(&d.word_topic).unwrap(), s.word_topic, "{name}");
        assert_eq!(gpu.download(&d.totals).unwrap(), s.totals, "{name}");
    }

    // Valid tokens of one word block sampled against another block's counts (a
    // model-parallel executor handed the wrong block): the CPU's error.
    let s = lda_state(8, 2000, 30, 100, 50, 77);
    let d = upload(gpu, &s);
    let other_rows = gpu.upload(&vec![0u32; 90 * 8]).unwrap();
    let shifted = Lda {
        word_topic: vec![0; 90 * 8],
        base: 60,
        ..lda_state(8, 2000, 30, 100, 50, 77)
    };
    let want = cpu_sample(&shifted).unwrap_err();
    assert!(matches!(
        want,
        KernelError::IndexOutOfRange { what: "words", .. }
    ));
    let mut out = poisoned(gpu, s.docs.len());
    let got = gpu_lda::sample_parallel(
        gpu,
        &s.params,
        &d.tokens,
        &d.topics,
        DeviceCounts {
            doc_topic: &d.doc_topic,
            word_topic: &other_rows,
            word_base: 60,
            topic_totals: &d.totals,
        },
        &d.uniforms,
        &mut out,
    );
    assert_eq!(got, Err(want), "other word block");
    assert!(out.download(gpu).unwrap().iter().all(|&t| t == u32::MAX));

    // Uniforms are checked when built: the CPU's error, nothing copied.
    for (name, position, value) in [("uniform = 1", 1234, 1.0f32), ("uniform NaN", 5, f32::NAN)] {
        let mut bad = s.uniforms.clone();
        bad[position] = value;
        let mut cpu = lda_state(8, 2000, 30, 100, 50, 77);
        cpu.uniforms = bad.clone();
        let want = cpu_sample(&cpu).unwrap_err();
        assert_eq!(
            DeviceUniforms::upload(gpu, &bad).unwrap_err(),
            want,
            "{name}"
        );
        let mut u = DeviceUniforms::upload(gpu, &s.uniforms).unwrap();
        assert_eq!(u.refill(gpu, &bad), Err(want), "{name} (refill)");
        assert_eq!(
            gpu.download(u.as_slice()).unwrap(),
            s.uniforms,
            "{name}: copied"
        );
    }

    // Length mismatches.
    assert_eq!(
        DeviceTokens::upload(
            gpu,
            Tokens {
                docs: &s.docs,
                words: &s.words[..5],
            },
        )
        .unwrap_err(),
        KernelError::LengthMismatch {
            what: "words",
            expected: 2000,
            actual: 5
        }
    );
    let short = DeviceUniforms::upload(gpu, &s.uniforms[..10]).unwrap();
    let mut out = poisoned(gpu, s.docs.len());
    let got = gpu_lda::sample_parallel(
        gpu,
        &s.params,
        &d.tokens,
        &d.topics,
        d.counts(s.base),
        &short,
        &mut out,
    );
    assert_eq!(
        got,
        Err(KernelError::LengthMismatch {
            what: "uniforms",
            expected: 2000,
            actual: 10
        })
    );
    let mut short_out = poisoned(gpu, 3);
    let got = gpu_lda::sample_parallel(
        gpu,
        &s.params,
        &d.tokens,
        &d.topics,
        d.counts(s.base),
        &d.uniforms,
        &mut short_out,
    );
    assert_eq!(
        got,
        Err(KernelError::LengthMismatch {
            what: "new_topics",
            expected: 2000,
            actual: 3
        })
    );
    assert!(short_out
        .download(gpu)
        .unwrap()
        .iter()
        .all(|&t| t == u32::MAX));
}

/// Not a conformance check: prints the parallel step's throughput and effective
/// bandwidth (8K + 20 logical bytes per token) next to a device-to-device copy, with the
/// same random corpus shapes as the first H100 measurements (tables mostly in L2; the
/// benchmark `harp-kernel-bench --kernel lda_sample_k20` uses tables larger than L2).
/// Run with `--ignored --nocapture` on the GPU machine.
#[test]
#[ignore]
fn lda_parallel_step_bandwidth() {
    let gpu = gpu_or_skip!();
    for &(k, n, docs, rows) in &[
        (20usize, 20_000_000usize, 200_000usize, 50_000usize),
        (100, 10_000_000, 100_000, 50_000),
        (1024, 2_000_000, 20_000, 20_000),
    ] {
        let s = lda_state(k, n, docs, rows, 0, 42);
        let d = upload(gpu, &s);
        let mut out = DeviceTopics::zeros(gpu, n).unwrap();
        let mut run = || {
            gpu_lda::sample_parallel(
                gpu,
                &s.params,
                &d.tokens,
                &d.topics,
                d.counts(0),
                &d.uniforms,
                &mut out,
            )
            .unwrap();
        };
        run(); // compile + warm-up
        gpu.synchronize().unwrap();
        let reps = 5;
        let start = std::time::Instant::now();
        for _ in 0..reps {
            run();
        }
        gpu.synchronize().unwrap();
        let secs = start.elapsed().as_secs_f64() / reps as f64;
        let bytes = (8 * k + 20) as f64 * n as f64;
        println!(
            "sample_parallel K={k} n={n} ({:?}): {:.1} M tokens/s, {:.0} GB/s logical",
            sample_variant(k),
            n as f64 / secs / 1e6,
            bytes / secs / 1e9
        );
    }
    // Device-to-device copy of 1 GiB for reference (read + write counted).
    let len = 1usize << 28;
    let src = gpu.alloc_zeros::<f32>(len).unwrap();
    let mut dst = gpu.alloc_zeros::<f32>(len).unwrap();
    gpu.stream().memcpy_dtod(&src, &mut dst).unwrap();
    gpu.synchronize().unwrap();
    let start = std::time::Instant::now();
    for _ in 0..5 {
        gpu.stream().memcpy_dtod(&src, &mut dst).unwrap();
    }
    gpu.synchronize().unwrap();
    let secs = start.elapsed().as_secs_f64() / 5.0;
    println!(
        "device copy: {:.0} GB/s (read + write)",
        2.0 * 4.0 * len as f64 / secs / 1e9
    );
}

// ---------------------------------------------------------------------------------
// MF

/// A batch of `n` ratings with distinct users and distinct items (no Hogwild races).
fn conflict_free(
    n: usize,
    users: usize,
    items: usize,
    seed: u64,
) -> (Vec<u32>, Vec<u32>, Vec<f32>) {
    let mut rng = FastRng::new(seed);
    let mut perm = |m: usize| {
        let mut v: Vec<u32> = (0..m as u32).collect();
        for i in (1..m).rev() {
            v.swap(i, rng.below(i as u32 + 1) as usize);
        }
        v
    };
    let u = perm(users)[..n].to_vec();
    let i = perm(items)[..n].to_vec();
    let mut rng = FastRng::new(seed + 1);
    let r = (0..n).map(|_| 1.0 + 4.0 * rng.next_f32()).collect();
    (u, i, r)
}

fn factors(rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut rng = FastRng::new(seed);
    (0..rows * k)
        .map(|_| 0.5 * (2.0 * rng.next_f32() - 1.0))
        .collect()
}

#[test]
fn sgd_on_conflict_free_batches_matches_cpu() {
    let gpu = gpu_or_skip!();
    let sgd = Sgd {
        lr: 0.05,
        lambda: 0.02,
    };
    for (case, &(k, n, users, items)) in [
        (1usize, 100usize, 200usize, 150usize),
        (16, 5000, 8000, 6000),
        (50, 20_000, 30_000, 25_000),
        (128, 60_000, 70_000, 60_000),
        (200, 3000, 3000, 4000),
    ]
    .iter()
    .enumerate()
    {
        let (u, i, r) = conflict_free(n, users, items, 900 + case as u64);
        let (mut p, mut q) = (factors(users, k, 1), factors(items, k, 2));
        let (mut dp, mut dq) = (gpu.upload(&p).unwrap(), gpu.upload(&q).unwrap());
        let (du, di, dr) = (
            gpu.upload(&u).unwrap(),
            gpu.upload(&i).unwrap(),
            gpu.upload(&r).unwrap(),
        );
        let ratings = DeviceRatings {
            users: &du,
            items: &di,
            values: &dr,
        };
        for _ in 0..3 {
            gpu_mf::sgd_step(gpu, k, sgd, ratings, &mut dp, &mut dq).unwrap();
            let host = Ratings {
                users: &u,
                items: &i,
                values: &r,
            };
            sgd_step(k, sgd, host, &mut p, &mut q).unwrap();
        }
        assert_close("sgd p", &gpu.download(&dp).unwrap(), &p, 1e-4);
        assert_close("sgd q", &gpu.download(&dq).unwrap(), &q, 1e-4);
    }
}

/// CSR with `rows` rows, about `per_row` entries each over `cols` columns (some rows
/// empty), values in [1, 5).
fn random_csr(
    rows: usize,
    cols: usize,
    per_row: usize,
    seed: u64,
) -> (Vec<u32>, Vec<u32>, Vec<f32>) {
    let mut rng = FastRng::new(seed);
    let mut offsets = vec![0u32];
    let (mut c, mut v) = (vec![], vec![]);
    for row in 0..rows {
        let m = if row % 17 == 5 {
            0
        } else {
            1 + rng.below(2 * per_row as u32) as usize
        };
        for _ in 0..m {
            c.push(rng.below(cols as u32));
            v.push(1.0 + 4.0 * rng.next_f32());
        }
        offsets.push(c.len() as u32);
    }
    (offsets, c, v)
}

#[test]
fn als_half_step_matches_cpu() {
    let gpu = gpu_or_skip!();
    for (case, &(k, rows, cols, per_row)) in [
        (1usize, 50usize, 40usize, 5usize),
        (8, 300, 200, 20),
        (37, 200, 500, 60),
        (64, 500, 2000, 100),
        (ALS_MAX_RANK, 200, 3000, 300),
    ]
    .iter()
    .enumerate()
    {
        let (o, c, v) = random_csr(rows, cols, per_row, 40 + case as u64);
        let fixed = factors(cols, k, 3);
        let lambda = 0.05;
        let mut want = vec![0.0f32; rows * k];
        let csr = Csr {
            offsets: &o,
            cols: &c,
            values: &v,
        };
        als_half_step(k, lambda, csr, &fixed, &mut want).unwrap();
        let (d_o, d_c, d_v, d_f) = (
            gpu.upload(&o).unwrap(),
            gpu.upload(&c).unwrap(),
            gpu.upload(&v).unwrap(),
            gpu.upload(&fixed).unwrap(),
        );
        let mut out = gpu.upload(&vec![7.0f32; rows * k]).unwrap();
        let dcsr = DeviceCsr {
            offsets: &d_o,
            cols: &d_c,
            values: &d_v,
        };
        gpu_mf::als_half_step(gpu, k, lambda, dcsr, &d_f, &mut out).unwrap();
        let got = gpu.download(&out).unwrap();
        for row in 0..rows {
            let (g, w) = (&got[row * k..(row + 1) * k], &want[row * k..(row + 1) * k]);
            let scale = w.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-3);
            for (j, (a, b)) in g.iter().zip(w).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-3 * scale,
                    "k={k} row {row}[{j}]: GPU {a} vs CPU {b}"
                );
            }
        }
    }
}

/// (name, users, items, values).
type RatingCase = (&'static str, Vec<u32>, Vec<u32>, Vec<f32>);
/// (name, offsets, cols, values, fixed factors).
type CsrCase = (&'static str, Vec<u32>, Vec<u32>, Vec<f32>, Vec<f32>);

#[test]
fn mf_refuses_bad_input_like_cpu() {
    let gpu = gpu_or_skip!();
    let sgd = Sgd {
        lr: 0.1,
        lambda: 0.01,
    };
    let k = 4;
    let (p0, q0) = (factors(10, k, 1), factors(8, k, 2));
    let cases: [RatingCase; 4] = [
        ("user", vec![0, 10, 2], vec![1, 2, 3], vec![1.0; 3]),
        ("item", vec![0, 1, 2], vec![1, 2, 8], vec![1.0; 3]),
        (
            "value",
            vec![0, 1, 2],
            vec![1, 2, 3],
            vec![1.0, f32::INFINITY, 1.0],
        ),
        (
            "user before value",
            vec![0, 1, 20],
            vec![1, 2, 3],
            vec![f32::NAN, 1.0, 1.0],
        ),
    ];
    for (name, u, i, r) in cases {
        let (mut p, mut q) = (p0.clone(), q0.clone());
        let host = Ratings {
            users: &u,
            items: &i,
            values: &r,
        };
        let want = sgd_step(k, sgd, host, &mut p, &mut q).unwrap_err();
        let (mut dp, mut dq) = (gpu.upload(&p0).unwrap(), gpu.upload(&q0).unwrap());
        let (du, di, dr) = (
            gpu.upload(&u).unwrap(),
            gpu.upload(&i).unwrap(),
            gpu.upload(&r).unwrap(),
        );
        let ratings = DeviceRatings {
            users: &du,
            items: &di,
            values: &dr,
        };
        let got = gpu_mf::sgd_step(gpu, k, sgd, ratings, &mut dp, &mut dq);
        assert_eq!(got, Err(want), "{name}");
        assert_eq!(gpu.download(&dp).unwrap(), p0, "{name}: p written");
        assert_eq!(gpu.download(&dq).unwrap(), q0, "{name}: q written");
    }

    // ALS: bad offsets, columns, values, factors, overflow, rank limit.
    let fixed = vec![1.0f32, 0.0, 0.0, 1.0];
    let als_cases: [CsrCase; 6] = [
        (
            "first offset",
            vec![1, 2, 2, 3],
            vec![0, 1, 1],
            vec![1.0; 3],
            fixed.clone(),
        ),
        (
            "decreasing",
            vec![0, 2, 1, 3],
            vec![0, 1, 1],
            vec![1.0; 3],
            fixed.clone(),
        ),
        (
            "last offset",
            vec![0, 2, 2, 2],
            vec![0, 1, 1],
            vec![1.0; 3],
            fixed.clone(),
        ),
        (
            "column",
            vec![0, 2, 2, 3],
            vec![0, 2, 1],
            vec![1.0; 3],
            fixed.clone(),
        ),
        (
            "value",
            vec![0, 2, 2, 3],
            vec![0, 1, 1],
            vec![1.0, f32::NAN, 1.0],
            fixed.clone(),
        ),
        (
            "factor",
            vec![0, 2, 2, 3],
            vec![0, 1, 1],
            vec![1.0; 3],
            vec![1.0, 0.0, f32::INFINITY, 1.0],
        ),
    ];
    for (name, o, c, v, f) in als_cases {
        let mut host_out = vec![42.0f32; 6];
        let csr = Csr {
            offsets: &o,
            cols: &c,
            values: &v,
        };
        let want = als_half_step(2, 0.1, csr, &f, &mut host_out).unwrap_err();
        let (d_o, d_c, d_v, d_f) = (
            gpu.upload(&o).unwrap(),
            gpu.upload(&c).unwrap(),
            gpu.upload(&v).unwrap(),
            gpu.upload(&f).unwrap(),
        );
        let mut out = gpu.upload(&[42.0f32; 6]).unwrap();
        let dcsr = DeviceCsr {
            offsets: &d_o,
            cols: &d_c,
            values: &d_v,
        };
        let got = gpu_mf::als_half_step(gpu, 2, 0.1, dcsr, &d_f, &mut out);
        assert_eq!(got, Err(want), "{name}");
        assert!(
            gpu.download(&out).unwrap().iter().all(|&x| x == 42.0),
            "{name}: out written"
        );
    }
    // f32 overflow in the normal matrix: NotPositiveDefinite for row 0, as on the CPU.
    let (o, c, v) = (vec![0u32, 2, 2, 3], vec![0u32, 1, 1], vec![1.0f32; 3]);
    let huge = vec![3e19f32, 0.0, 0.0, 1.0];
    let (d_o, d_c, d_v, d_f) = (
        gpu.upload(&o).unwrap(),
        gpu.upload(&c).unwrap(),
        gpu.upload(&v).unwrap(),
        gpu.upload(&huge).unwrap(),
    );
    let dcsr = DeviceCsr {
        offsets: &d_o,
        cols: &d_c,
        values: &d_v,
    };
    let mut out = gpu.upload(&[42.0f32; 6]).unwrap();
    assert_eq!(
        gpu_mf::als_half_step(gpu, 2, 0.1, dcsr, &d_f, &mut out),
        Err(KernelError::NotPositiveDefinite { row: 0 })
    );
    assert!(gpu.download(&out).unwrap().iter().all(|&x| x == 42.0));
    // Rank above the GPU limit.
    let big_fixed = gpu.upload(&vec![0.0f32; 2 * (ALS_MAX_RANK + 1)]).unwrap();
    let mut big_out = gpu.upload(&vec![0.0f32; 3 * (ALS_MAX_RANK + 1)]).unwrap();
    assert_eq!(
        gpu_mf::als_half_step(gpu, ALS_MAX_RANK + 1, 0.1, dcsr, &big_fixed, &mut big_out),
        Err(KernelError::GpuLimit {
            what: "rank",
            value: ALS_MAX_RANK + 1,
            max: ALS_MAX_RANK
        })
    );
}
