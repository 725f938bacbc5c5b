//! CUDA conformance for the LDA and MF kernels: each GPU kernel agrees with its CPU
//! version and refuses bad input with the CPU's error, writing nothing.
//!
//! Tolerances:
//! * LDA parallel sampling step: the GPU performs the CPU version's f32 operations in
//!   the same order, so topics must be identical for at least 99.9% of tokens
//!   (differences are only possible where the hardware rounds differently at a
//!   cumulative boundary); count rebuilds must be exactly equal;
//! * SGD on batches without repeated users or items (so the Hogwild kernel has no
//!   races and order does not matter): `|gpu − cpu| <= 1e-4 (1 + |cpu|)`;
//! * ALS half-step: per row, `|gpu − cpu| <= 1e-3 · max(‖cpu row‖∞, 1e-3)`.
//!
//! Without a CUDA device every case prints `skipped: no CUDA device (<reason>)` and
//! passes (see `cuda_common`; `HARP_REQUIRE_GPU=1` turns that into a failure).
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::assert_close;
use harp_kernels::cuda::lda::{self as gpu_lda, DeviceCounts, DeviceCountsMut, DeviceTokens};
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
    let tokens = Tokens {
        docs: &s.docs,
        words: &s.words,
    };
    let counts = CountsMut {
        doc_topic: &mut s.doc_topic,
        word_topic: &mut s.word_topic,
        word_base: base,
        topic_totals: &mut s.totals,
    };
    rebuild_counts(&s.params, tokens, &s.topics, counts).unwrap();
    s
}

/// Device copies of an LDA state.
struct DevLda {
    docs: cudarc::driver::CudaSlice<u32>,
    words: cudarc::driver::CudaSlice<u32>,
    topics: cudarc::driver::CudaSlice<u32>,
    doc_topic: cudarc::driver::CudaSlice<u32>,
    word_topic: cudarc::driver::CudaSlice<u32>,
    totals: cudarc::driver::CudaSlice<u32>,
    uniforms: cudarc::driver::CudaSlice<f32>,
}

use harp_kernels::cuda::cudarc;

fn upload(gpu: &Gpu, s: &Lda) -> DevLda {
    DevLda {
        docs: gpu.upload(&s.docs).unwrap(),
        words: gpu.upload(&s.words).unwrap(),
        topics: gpu.upload(&s.topics).unwrap(),
        doc_topic: gpu.upload(&s.doc_topic).unwrap(),
        word_topic: gpu.upload(&s.word_topic).unwrap(),
        totals: gpu.upload(&s.totals).unwrap(),
        uniforms: gpu.upload(&s.uniforms).unwrap(),
    }
}

fn gpu_sample(gpu: &Gpu, s: &Lda, d: &DevLda) -> Result<Vec<u32>, KernelError> {
    let mut out = gpu.upload(&vec![u32::MAX; s.docs.len()]).unwrap();
    gpu_lda::sample_parallel(
        gpu,
        &s.params,
        DeviceTokens {
            docs: &d.docs,
            words: &d.words,
        },
        &d.topics,
        DeviceCounts {
            doc_topic: &d.doc_topic,
            word_topic: &d.word_topic,
            word_base: s.base,
            topic_totals: &d.totals,
        },
        &d.uniforms,
        &mut out,
    )?;
    Ok(gpu.download(&out).unwrap())
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

#[test]
fn lda_parallel_step_matches_cpu() {
    let gpu = gpu_or_skip!();
    let cases = [
        (1usize, 1000usize, 10usize, 50usize, 0u32),
        (7, 5000, 40, 300, 0),
        (20, 200_000, 2000, 5000, 0),
        (32, 50_000, 500, 1000, 123),
        (33, 50_000, 500, 1000, 0),
        (100, 100_000, 1000, 3000, 4000),
        (1024, 20_000, 200, 500, 0),
        (2500, 5000, 50, 200, 9),
    ];
    for (case, &(k, n, docs, rows, base)) in cases.iter().enumerate() {
        let s = lda_state(k, n, docs, rows, base, 300 + case as u64);
        let d = upload(gpu, &s);
        let g = gpu_sample(gpu, &s, &d).unwrap();
        let c = cpu_sample(&s).unwrap();
        let same = g.iter().zip(&c).filter(|(a, b)| a == b).count();
        println!("LDA K={k} n={n}: {same}/{n} identical topics");
        assert!(
            g.iter().all(|&t| (t as usize) < k),
            "K={k}: topic out of range"
        );
        assert!(
            same as f64 >= 0.999 * n as f64,
            "K={k}: only {same}/{n} topics identical"
        );
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
        d.topics = gpu.upload(&s.topics).unwrap();
        gpu_lda::rebuild_counts(
            gpu,
            &s.params,
            DeviceTokens {
                docs: &d.docs,
                words: &d.words,
            },
            &d.topics,
            DeviceCountsMut {
                doc_topic: &mut d.doc_topic,
                word_topic: &mut d.word_topic,
                word_base: s.base,
                topic_totals: &mut d.totals,
            },
        )
        .unwrap();
        let counts = CountsMut {
            doc_topic: &mut s.doc_topic,
            word_topic: &mut s.word_topic,
            word_base: s.base,
            topic_totals: &mut s.totals,
        };
        let tokens = Tokens {
            docs: &s.docs,
            words: &s.words,
        };
        rebuild_counts(&s.params, tokens, &s.topics, counts).unwrap();
        assert_eq!(gpu.download(&d.doc_topic).unwrap(), s.doc_topic, "K={k}");
        assert_eq!(gpu.download(&d.word_topic).unwrap(), s.word_topic, "K={k}");
        assert_eq!(gpu.download(&d.totals).unwrap(), s.totals, "K={k}");
    }
}

#[test]
fn lda_refuses_bad_input_like_cpu() {
    let gpu = gpu_or_skip!();
    let base = lda_state(8, 2000, 30, 100, 50, 77);
    type Breaker = fn(&mut Lda);
    let breakers: [(&str, Breaker); 7] = [
        ("doc row", |s| s.docs[1500] = 30),
        ("word above the block", |s| s.words[700] = 150),
        ("word below the block", |s| s.words[900] = 49),
        ("topic", |s| s.topics[3] = 8),
        ("two kinds: doc wins", |s| {
            s.topics[10] = 99;
            s.docs[1999] = 1000;
        }),
        ("uniform = 1", |s| s.uniforms[1234] = 1.0),
        ("uniform NaN", |s| s.uniforms[5] = f32::NAN),
    ];
    for (name, breaker) in breakers {
        let mut s = lda_state(8, 2000, 30, 100, 50, 77);
        breaker(&mut s);
        let want = cpu_sample(&s).unwrap_err();
        let d = upload(gpu, &s);
        let mut out = gpu.upload(&vec![u32::MAX; s.docs.len()]).unwrap();
        let got = gpu_lda::sample_parallel(
            gpu,
            &s.params,
            DeviceTokens {
                docs: &d.docs,
                words: &d.words,
            },
            &d.topics,
            DeviceCounts {
                doc_topic: &d.doc_topic,
                word_topic: &d.word_topic,
                word_base: s.base,
                topic_totals: &d.totals,
            },
            &d.uniforms,
            &mut out,
        );
        assert_eq!(got, Err(want), "{name}");
        assert!(
            gpu.download(&out).unwrap().iter().all(|&t| t == u32::MAX),
            "{name}: new_topics written on error"
        );
    }
    // Length mismatch.
    let d = upload(gpu, &base);
    let short = gpu.upload(&base.uniforms[..10]).unwrap();
    let mut out = gpu.upload(&vec![0u32; base.docs.len()]).unwrap();
    let got = gpu_lda::sample_parallel(
        gpu,
        &base.params,
        DeviceTokens {
            docs: &d.docs,
            words: &d.words,
        },
        &d.topics,
        DeviceCounts {
            doc_topic: &d.doc_topic,
            word_topic: &d.word_topic,
            word_base: base.base,
            topic_totals: &d.totals,
        },
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
}

/// Not a conformance check: prints the parallel step's throughput and effective
/// bandwidth (8K + 20 logical bytes per token) next to a device-to-device copy.
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
        let mut out = gpu.alloc_zeros::<u32>(n).unwrap();
        let run = |out: &mut cudarc::driver::CudaSlice<u32>| {
            gpu_lda::sample_parallel(
                gpu,
                &s.params,
                DeviceTokens {
                    docs: &d.docs,
                    words: &d.words,
                },
                &d.topics,
                DeviceCounts {
                    doc_topic: &d.doc_topic,
                    word_topic: &d.word_topic,
                    word_base: 0,
                    topic_totals: &d.totals,
                },
                &d.uniforms,
                out,
            )
            .unwrap();
        };
        run(&mut out); // compile + warm-up
        gpu.synchronize().unwrap();
        let reps = 5;
        let start = std::time::Instant::now();
        for _ in 0..reps {
            run(&mut out);
        }
        gpu.synchronize().unwrap();
        let secs = start.elapsed().as_secs_f64() / reps as f64;
        let bytes = (8 * k + 20) as f64 * n as f64;
        println!(
            "sample_parallel K={k} n={n}: {:.1} M tokens/s, {:.0} GB/s logical (incl. the host-synchronized id checks)",
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
