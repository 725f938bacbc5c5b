//! `harp-kernel-bench`: how close harp's bandwidth-bound CUDA kernels come to the
//! device's copy bandwidth.
//!
//! First measures device-to-device `memcpy` of a 256 MiB+ buffer (bytes read + bytes
//! written per iteration), then each kernel in [`CASES`] on `--elements` elements
//! (default 64 Mi), with warm-up launches and `--reps` timed repetitions between two
//! CUDA events. Prints one JSON line per measurement on stdout:
//!
//! `{"kernel":"adam","elements":67108864,"bytes_per_iter":1879048192,"gbps":..,"copy_gbps":..,"ratio":..,"ms_per_iter":..}`
//!
//! `bytes_per_iter` counts every array element each iteration must read or write once
//! (e.g. Adam reads w, m, v, g and writes w, m, v: 28 bytes per element). The LDA and MF
//! cases size their problem from `--elements` (about `16 × elements` logical bytes per
//! iteration), report `elements` as tokens / ratings / rows, and add fields: the byte
//! formula (`bytes_formula`), the problem shape, and for the compute-bound ALS half-step
//! `gflops` (its `ratio` has no target). Without a CUDA device it prints why on stderr and
//! exits 0 (1 if `HARP_REQUIRE_GPU=1`). Needs the `cuda` feature.
//!
//! `--cubin-dir DIR [--arch sm_90]` measures nothing and needs no GPU: it writes every CUDA
//! source compiled for that architecture to `DIR/<source>.cubin`, for `scripts/sass.sh`.

use std::process::ExitCode;

use clap::Parser;
use harp_kernels::cuda::cudarc::driver::sys::CUevent_flags;
use harp_kernels::cuda::cudarc::driver::CudaSlice;
use harp_kernels::cuda::lda::{
    self as gpu_lda, sample_variant, sample_variants, DeviceCounts, DeviceCountsMut, DeviceTokens,
    DeviceTopics, DeviceUniforms, SampleVariant,
};
use harp_kernels::cuda::mf::{self as gpu_mf, DeviceCsr, DeviceRatings};
use harp_kernels::cuda::{compile_cubin, optim, Gpu, SOURCES};
use harp_kernels::lda::Tokens;
use harp_kernels::{AdaGrad, Adam, FastRng, KernelError, LdaParams, Sgd};
use serde_json::{json, Map, Value};

#[derive(Parser, Debug)]
#[command(
    name = "harp-kernel-bench",
    about = "Bandwidth of harp's CUDA kernels against device copy bandwidth (one JSON line each)"
)]
struct Args {
    /// Elements (f32) per array for the kernels.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    elements: usize,
    /// Timed repetitions per measurement.
    #[arg(long, default_value_t = 20)]
    reps: u32,
    /// Untimed warm-up repetitions per measurement (the first also compiles the kernel).
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Only run these kernels (repeatable); the copy baseline always runs.
    #[arg(long = "kernel")]
    kernels: Vec<String>,
    /// Measure nothing: compile every CUDA source with NVRTC for `--arch` and write the
    /// cubins to this directory (`<source>.cubin`), for reading the SASS without a GPU
    /// (`scripts/sass.sh`).
    #[arg(long, value_name = "DIR")]
    cubin_dir: Option<std::path::PathBuf>,
    /// The real architecture of `--cubin-dir` (sm_90: H100).
    #[arg(long, default_value = "sm_90", requires = "cubin_dir")]
    arch: String,
}

/// Compiles every source of [`SOURCES`] for `arch` into `dir/<source>.cubin`.
fn write_cubins(dir: &std::path::Path, arch: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for src in SOURCES {
        let cubin = compile_cubin(src, arch).map_err(|e| e.to_string())?;
        let path = dir.join(format!("{}.cubin", src.name.trim_end_matches(".cu")));
        std::fs::write(&path, cubin)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        print_line(&path.display().to_string());
    }
    Ok(())
}

/// One timed kernel: elements per array, bytes moved per iteration, milliseconds per
/// iteration, and any extra JSON fields (problem shape, byte formula, GFLOP/s).
struct Measured {
    elements: usize,
    bytes_per_iter: u64,
    ms_per_iter: f64,
    extra: Map<String, Value>,
}

type CaseFn = fn(&Gpu, &Args) -> Result<Measured, KernelError>;

/// The kernels measured, by name. Add new kernels here: a function that allocates its
/// buffers, states its bytes per iteration, and times the launch with [`time_per_iter`].
const CASES: &[(&str, CaseFn)] = &[
    ("add_assign", bench_add_assign),
    ("axpy", bench_axpy),
    ("adagrad", bench_adagrad),
    ("adam", bench_adam),
    ("lda_sample_k20", |g, a| bench_lda_sample(g, a, 20)),
    ("lda_sample_k64", |g, a| bench_lda_sample(g, a, 64)),
    ("lda_sample_k80", |g, a| bench_lda_sample(g, a, 80)),
    ("lda_sample_k100", |g, a| bench_lda_sample(g, a, 100)),
    ("lda_sample_k128", |g, a| bench_lda_sample(g, a, 128)),
    ("lda_sample_k256", |g, a| bench_lda_sample(g, a, 256)),
    ("lda_sample_k1024", |g, a| bench_lda_sample(g, a, 1024)),
    ("lda_rebuild_k20", |g, a| bench_lda_rebuild(g, a, 20)),
    ("mf_sgd", bench_mf_sgd),
    ("als_half_step", bench_als),
];

/// Smallest copy buffer: 256 MiB of f32.
const MIN_COPY_ELEMENTS: usize = 64 * 1024 * 1024;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(dir) = &args.cubin_dir {
        return match write_cubins(dir, &args.arch) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("harp-kernel-bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.elements == 0 {
        eprintln!("harp-kernel-bench: --elements must be positive");
        return ExitCode::FAILURE;
    }
    let unknown: Vec<&String> = args
        .kernels
        .iter()
        .filter(|k| !CASES.iter().any(|(name, _)| name == k))
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = CASES.iter().map(|(name, _)| *name).collect();
        eprintln!("harp-kernel-bench: unknown kernel(s) {unknown:?}; known: {known:?}");
        return ExitCode::FAILURE;
    }
    let gpu = match Gpu::open(args.device) {
        Ok(gpu) => gpu,
        Err(e) => {
            eprintln!("harp-kernel-bench: skipped, {e}; nothing measured");
            // gpu-bundle/run.sh sets HARP_REQUIRE_GPU=1: there a missing device is an error.
            return if std::env::var("HARP_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    eprintln!(
        "harp-kernel-bench: {} ({}, {} SMs), {} elements, {} warm-up + {} timed reps",
        gpu.name(),
        gpu.arch(),
        gpu.sm_count(),
        args.elements,
        args.warmup,
        args.reps
    );
    match run(&gpu, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harp-kernel-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(gpu: &Gpu, args: &Args) -> Result<(), KernelError> {
    let copy = bench_copy(gpu, args)?;
    let copy_gbps = gbps(&copy);
    report("copy", &copy, copy_gbps);
    for (name, case) in CASES {
        if args.kernels.is_empty() || args.kernels.iter().any(|k| k == name) {
            let measured = case(gpu, args)?;
            report(name, &measured, copy_gbps);
        }
    }
    Ok(())
}

fn gbps(m: &Measured) -> f64 {
    m.bytes_per_iter as f64 / (m.ms_per_iter * 1e-3) / 1e9
}

fn report(kernel: &str, m: &Measured, copy_gbps: f64) {
    let gbps = gbps(m);
    let mut line = json!({
        "kernel": kernel,
        "elements": m.elements,
        "bytes_per_iter": m.bytes_per_iter,
        "gbps": gbps,
        "copy_gbps": copy_gbps,
        "ratio": gbps / copy_gbps,
        "ms_per_iter": m.ms_per_iter,
    });
    if let Value::Object(fields) = &mut line {
        fields.extend(m.extra.clone());
    }
    print_line(&line.to_string());
}

/// Prints one line to stdout. If stdout is gone (its reader exited early, e.g. `| head`),
/// no one is left to report to: says so on stderr and exits 1 instead of panicking.
fn print_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        eprintln!("harp-kernel-bench: cannot write to stdout ({e}); stopping");
        std::process::exit(1);
    }
}

fn cuda_err(
    op: &'static str,
) -> impl FnOnce(harp_kernels::cuda::cudarc::driver::DriverError) -> KernelError {
    move |e| KernelError::Cuda {
        op,
        message: e.to_string(),
    }
}

/// Runs `step` `warmup` times untimed, then `reps` times between two CUDA events on
/// the GPU's stream; returns milliseconds per repetition.
fn time_per_iter(
    gpu: &Gpu,
    args: &Args,
    mut step: impl FnMut() -> Result<(), KernelError>,
) -> Result<f64, KernelError> {
    for _ in 0..args.warmup {
        step()?;
    }
    gpu.synchronize()?;
    let reps = args.reps.max(1);
    let stream = gpu.stream();
    let start = stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_err("event record"))?;
    for _ in 0..reps {
        step()?;
    }
    let end = stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_err("event record"))?;
    end.synchronize().map_err(cuda_err("event synchronize"))?;
    let ms = start.elapsed_ms(&end).map_err(cuda_err("event elapsed"))?;
    Ok(f64::from(ms) / f64::from(reps))
}

fn filled(gpu: &Gpu, n: usize, value: f32) -> Result<CudaSlice<f32>, KernelError> {
    gpu.upload(&vec![value; n])
}

fn measured(elements: usize, arrays_touched: u64, ms_per_iter: f64) -> Measured {
    Measured {
        elements,
        bytes_per_iter: arrays_touched * elements as u64 * 4,
        ms_per_iter,
        extra: Map::new(),
    }
}

/// Device-to-device copy: reads and writes the buffer once per iteration.
fn bench_copy(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements.max(MIN_COPY_ELEMENTS);
    let src = filled(gpu, n, 1.0)?;
    let mut dst = gpu.alloc_zeros::<f32>(n)?;
    let stream = gpu.stream().clone();
    let ms = time_per_iter(gpu, args, || {
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(cuda_err("memcpy_dtod"))
    })?;
    Ok(measured(n, 2, ms))
}

/// `dst += src`: reads dst and src, writes dst.
fn bench_add_assign(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements;
    let mut dst = filled(gpu, n, 0.0)?;
    let src = filled(gpu, n, 1e-3)?;
    let ms = time_per_iter(gpu, args, || optim::add_assign(gpu, &mut dst, &src))?;
    Ok(measured(n, 3, ms))
}

/// `dst += alpha src`: reads dst and src, writes dst.
fn bench_axpy(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements;
    let mut dst = filled(gpu, n, 0.0)?;
    let src = filled(gpu, n, 1e-3)?;
    let ms = time_per_iter(gpu, args, || optim::axpy(gpu, &mut dst, -0.5, &src))?;
    Ok(measured(n, 3, ms))
}

/// AdaGrad: reads w, accum, grad; writes w, accum.
fn bench_adagrad(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements;
    let mut w = filled(gpu, n, 0.5)?;
    let mut accum = filled(gpu, n, 0.0)?;
    let grad = filled(gpu, n, 0.01)?;
    let p = AdaGrad::default();
    let ms = time_per_iter(gpu, args, || {
        optim::adagrad_step(gpu, &mut w, &grad, &mut accum, &p)
    })?;
    Ok(measured(n, 5, ms))
}

/// Adam: reads w, m, v, grad; writes w, m, v.
fn bench_adam(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements;
    let mut w = filled(gpu, n, 0.5)?;
    let mut m = filled(gpu, n, 0.0)?;
    let mut v = filled(gpu, n, 0.0)?;
    let grad = filled(gpu, n, 0.01)?;
    let p = Adam::default();
    let mut step = 0u64;
    let ms = time_per_iter(gpu, args, || {
        step += 1;
        optim::adam_step(gpu, &mut w, &grad, &mut m, &mut v, &p, step)
    })?;
    Ok(measured(n, 7, ms))
}

/// Logical bytes per iteration the LDA/MF cases aim for: as much as a kernel touching four
/// f32 arrays of `--elements` (1 GiB at the default).
fn target_bytes(args: &Args) -> usize {
    args.elements.saturating_mul(16)
}

/// Smallest document table of the LDA cases: 256 MiB, five times the H100's 50 MiB L2, so
/// document rows come from device memory.
const LDA_MIN_DOC_TABLE_BYTES: usize = 256 << 20;
/// Vocabulary of the LDA cases (word rows: 4 MB at K = 20, 200 MB at K = 1024).
const LDA_WORDS: usize = 50_000;

/// A random corpus on the device: tokens in random order over `docs` documents and
/// `LDA_WORDS` words, random topics, counts rebuilt on the device.
struct DevCorpus {
    params: LdaParams,
    docs: usize,
    tokens: DeviceTokens,
    topics: DeviceTopics,
    doc_topic: CudaSlice<u32>,
    word_topic: CudaSlice<u32>,
    totals: CudaSlice<u32>,
}

fn lda_corpus(gpu: &Gpu, k: usize, n: usize, docs: usize) -> Result<DevCorpus, KernelError> {
    let params = LdaParams {
        topics: k,
        vocab: LDA_WORDS,
        alpha: 0.1,
        beta: 0.01,
    };
    let mut rng = FastRng::new(k as u64);
    let doc_ids: Vec<u32> = (0..n).map(|_| rng.below(docs as u32)).collect();
    let word_ids: Vec<u32> = (0..n).map(|_| rng.below(LDA_WORDS as u32)).collect();
    let topic_ids: Vec<u32> = (0..n).map(|_| rng.below(k as u32)).collect();
    let tokens = DeviceTokens::upload(
        gpu,
        Tokens {
            docs: &doc_ids,
            words: &word_ids,
        },
    )?;
    let topics = DeviceTopics::upload(gpu, &topic_ids)?;
    let mut c = DevCorpus {
        params,
        docs,
        tokens,
        topics,
        doc_topic: gpu.alloc_zeros(docs * k)?,
        word_topic: gpu.alloc_zeros(LDA_WORDS * k)?,
        totals: gpu.alloc_zeros(k)?,
    };
    rebuild(gpu, &mut c)?;
    Ok(c)
}

fn rebuild(gpu: &Gpu, c: &mut DevCorpus) -> Result<(), KernelError> {
    gpu_lda::rebuild_counts(
        gpu,
        &c.params,
        &c.tokens,
        &c.topics,
        DeviceCountsMut {
            doc_topic: &mut c.doc_topic,
            word_topic: &mut c.word_topic,
            word_base: 0,
            topic_totals: &mut c.totals,
        },
    )
}

/// Token count and document count of an LDA case with `bytes_per_token` logical bytes.
fn lda_shape(args: &Args, k: usize, bytes_per_token: usize) -> (usize, usize) {
    let n = (target_bytes(args) / bytes_per_token).max(1);
    let docs = (n / 4)
        .max(LDA_MIN_DOC_TABLE_BYTES / (4 * k))
        .min(u32::MAX as usize);
    (n, docs)
}

fn lda_fields(c: &DevCorpus, k: usize, formula: String) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("topics".into(), json!(k));
    m.insert("docs".into(), json!(c.docs));
    m.insert("words".into(), json!(LDA_WORDS));
    m.insert("doc_table_bytes".into(), json!(c.docs * k * 4));
    m.insert("word_table_bytes".into(), json!(LDA_WORDS * k * 4));
    m.insert("bytes_formula".into(), json!(formula));
    m
}

/// One LDA parallel sampling step at `K = k`: tokens in random order (no reuse of a
/// document's row between neighbouring tokens), a document table of at least 256 MiB.
/// Logical bytes: `tokens · (8K + 20)`.
fn bench_lda_sample(gpu: &Gpu, args: &Args, k: usize) -> Result<Measured, KernelError> {
    let per_token = 8 * k + 20;
    let (n, docs) = lda_shape(args, k, per_token);
    let c = lda_corpus(gpu, k, n, docs)?;
    let uniforms = DeviceUniforms::generate(gpu, n, 7)?;
    let mut out = DeviceTopics::zeros(gpu, n)?;
    let counts = DeviceCounts {
        doc_topic: &c.doc_topic,
        word_topic: &c.word_topic,
        word_base: 0,
        topic_totals: &c.totals,
    };
    let mut time_variant = |variant: SampleVariant| {
        time_per_iter(gpu, args, || {
            gpu_lda::sample_parallel_with(
                variant, gpu, &c.params, &c.tokens, &c.topics, counts, &uniforms, &mut out,
            )
        })
    };
    let ms = time_variant(sample_variant(k))?;
    // The other kernels that can sample K (not the two-pass fallback), for comparison:
    // GB/s of the same logical bytes.
    let mut alternatives = Map::new();
    for variant in sample_variants(k).into_iter().skip(1) {
        if variant != SampleVariant::WarpRecompute {
            let alt_ms = time_variant(variant)?;
            let gbps = (n * per_token) as f64 / (alt_ms * 1e-3) / 1e9;
            alternatives.insert(format!("{variant:?}"), json!(gbps));
        }
    }
    let mut extra = lda_fields(
        &c,
        k,
        format!(
            "tokens * (8K + 20) = {n} * {per_token}: per token its doc id, word id, topic and \
             uniform (16 B), its new topic (4 B), its document row and word row (2 * 4K B); \
             topic totals (shared) not counted; tokens in random order"
        ),
    );
    extra.insert("variant".into(), json!(format!("{:?}", sample_variant(k))));
    extra.insert("alternatives_gbps".into(), Value::Object(alternatives));
    Ok(Measured {
        elements: n,
        bytes_per_iter: (n * per_token) as u64,
        ms_per_iter: ms,
        extra,
    })
}

/// Rebuilding the LDA counts at `K = k` (zero the tables, then one atomic increment per
/// token in its document row and word row; totals via a shared-memory histogram).
/// Logical bytes: `tokens · 28 + 4K · (docs + words + 1)`.
fn bench_lda_rebuild(gpu: &Gpu, args: &Args, k: usize) -> Result<Measured, KernelError> {
    let per_token = 28;
    let (n, docs) = lda_shape(args, k, per_token);
    let mut c = lda_corpus(gpu, k, n, docs)?;
    let tables = 4 * k * (docs + LDA_WORDS + 1);
    let ms = time_per_iter(gpu, args, || rebuild(gpu, &mut c))?;
    let extra = lda_fields(
        &c,
        k,
        format!(
            "tokens * 28 + 4K * (docs + words + 1) = {n} * 28 + {tables}: per token its doc \
             id, word id and topic (12 B) and two atomic increments (read + write 4 B each); \
             every count zeroed once; atomic-bound, not a streaming kernel"
        ),
    );
    Ok(Measured {
        elements: n,
        bytes_per_iter: (n * per_token + tables) as u64,
        ms_per_iter: ms,
        extra,
    })
}

/// MF rank of the MF cases.
const MF_RANK: usize = 32;

/// A device buffer of `len` values uniform in `[lo, hi)`.
fn random_f32(
    gpu: &Gpu,
    len: usize,
    lo: f32,
    hi: f32,
    seed: u64,
) -> Result<CudaSlice<f32>, KernelError> {
    let mut rng = FastRng::new(seed);
    let host: Vec<f32> = (0..len).map(|_| lo + (hi - lo) * rng.next_f32()).collect();
    gpu.upload(&host)
}

/// Hogwild SGD over a random batch (users and items drawn independently, so ratings may
/// share rows), rank 32. Logical bytes: `ratings · (12 + 4 · 2 · 2 · 32)`.
fn bench_mf_sgd(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let k = MF_RANK;
    let per_rating = 12 + 4 * 2 * 2 * k;
    let n = (target_bytes(args) / per_rating).max(1);
    let (users, items) = (1usize << 21, 1usize << 17);
    let mut rng = FastRng::new(11);
    let u: Vec<u32> = (0..n).map(|_| rng.below(users as u32)).collect();
    let i: Vec<u32> = (0..n).map(|_| rng.below(items as u32)).collect();
    let (du, di) = (gpu.upload(&u)?, gpu.upload(&i)?);
    let dr = random_f32(gpu, n, 1.0, 5.0, 12)?;
    let mut p = random_f32(gpu, users * k, -0.1, 0.1, 13)?;
    let mut q = random_f32(gpu, items * k, -0.1, 0.1, 14)?;
    let sgd = Sgd {
        lr: 0.005,
        lambda: 0.02,
    };
    let ratings = DeviceRatings {
        users: &du,
        items: &di,
        values: &dr,
    };
    let ms = time_per_iter(gpu, args, || {
        gpu_mf::sgd_step(gpu, k, sgd, ratings, &mut p, &mut q)
    })?;
    let mut extra = Map::new();
    extra.insert("rank".into(), json!(k));
    extra.insert("users".into(), json!(users));
    extra.insert("items".into(), json!(items));
    extra.insert(
        "bytes_formula".into(),
        json!(format!(
            "ratings * (12 + 4 * 2 * 2 * rank) = {n} * {per_rating}: user id, item id, value \
             (12 B), user and item factor rows each read and written; random batch (Hogwild); \
             includes the wrapper's per-call device id/value check"
        )),
    );
    Ok(Measured {
        elements: n,
        bytes_per_iter: (n * per_rating) as u64,
        ms_per_iter: ms,
        extra,
    })
}

/// ALS half-step at rank 32 over a random CSR matrix (1 to 127 ratings per row, 64 on
/// average) against 50 000 fixed factor rows. Compute-bound: reports GFLOP/s; `ratio`
/// (bytes below against copy bandwidth) has no target.
fn bench_als(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let k = MF_RANK;
    let rows = (args.elements / 512).max(1);
    let cols = 50_000usize;
    let mut rng = FastRng::new(21);
    let mut offsets = Vec::with_capacity(rows + 1);
    offsets.push(0u32);
    let mut col_ids = Vec::new();
    for _ in 0..rows {
        let m = 1 + rng.below(127) as usize;
        col_ids.extend((0..m).map(|_| rng.below(cols as u32)));
        let end = u32::try_from(col_ids.len()).map_err(|_| KernelError::ShapeOverflow {
            what: "als ratings",
        })?;
        offsets.push(end);
    }
    let nnz = col_ids.len();
    let (d_o, d_c) = (gpu.upload(&offsets)?, gpu.upload(&col_ids)?);
    let d_v = random_f32(gpu, nnz, 1.0, 5.0, 22)?;
    let fixed = random_f32(gpu, cols * k, -0.5, 0.5, 23)?;
    let mut out = gpu.alloc_zeros::<f32>(rows * k)?;
    let csr = DeviceCsr {
        offsets: &d_o,
        cols: &d_c,
        values: &d_v,
    };
    let ms = time_per_iter(gpu, args, || {
        gpu_mf::als_half_step(gpu, k, 0.05, csr, &fixed, &mut out)
    })?;
    let (kf, nnzf, rowsf) = (k as f64, nnz as f64, rows as f64);
    let flops = nnzf * (kf * (kf + 1.0) + 2.0 * kf) + rowsf * (kf * kf * kf / 3.0 + 2.0 * kf * kf);
    let bytes = 4 * (rows + 1) + 8 * nnz + 4 * k * nnz + 4 * k * rows + 8 * k * rows;
    let mut extra = Map::new();
    extra.insert("rank".into(), json!(k));
    extra.insert("rows".into(), json!(rows));
    extra.insert("nnz".into(), json!(nnz));
    extra.insert("cols".into(), json!(cols));
    extra.insert("gflops".into(), json!(flops / (ms * 1e-3) / 1e9));
    extra.insert(
        "flops_formula".into(),
        json!(
            "nnz * (k(k+1) + 2k) + rows * (k^3/3 + 2k^2): normal-matrix lower triangle and \
               right-hand side per rating (multiply + add), Cholesky, two triangular solves"
        ),
    );
    extra.insert(
        "bytes_formula".into(),
        json!(
            "4(rows+1) + 8 nnz + 4k nnz + 12k rows: offsets, column ids and values, the \
               gathered factor row per rating, the solution written to scratch, then copied \
               (read + write) to out; compute-bound, no ratio target"
        ),
    );
    Ok(Measured {
        elements: rows,
        bytes_per_iter: bytes as u64,
        ms_per_iter: ms,
        extra,
    })
}
