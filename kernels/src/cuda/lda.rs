//! CUDA versions of the LDA parallel sampling step and count rebuild in
//! [`crate::lda`], on device buffers (`kernels/cuda/lda.cu`).
//!
//! [`sample_parallel`] has exactly the contract and arithmetic of
//! [`crate::lda::sample_parallel`] (one warp per token, the same f32 operations in the
//! same order, no fused multiply-adds), so its topics equal the CPU version's except
//! where the two round differently. Per token it reads `8K + 20` logical bytes (document
//! and word rows, ids, topic, uniform; topic totals are shared): compare its tokens/s ×
//! bytes with the device copy bandwidth.
//!
//! Like the CPU versions, the wrappers validate lengths and hyperparameters on the host,
//! and every id and uniform with a small check kernel on the device, reading the result
//! back (one synchronization) before launching the kernel that writes: on error nothing
//! is written. Launches are asynchronous on [`Gpu::stream`].

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::optim::check_device;
use super::{driver_err, CudaSource, Gpu};
use crate::error::{check_len, KernelError};
use crate::lda::LdaParams;

/// `kernels/cuda/lda.cu`.
pub const SOURCE: CudaSource = CudaSource {
    name: "lda.cu",
    code: include_str!("../../cuda/lda.cu"),
};

/// Largest `K` whose topic totals are histogrammed in shared memory by the count kernel
/// (larger `K` adds to global memory directly).
const SHARED_TOTALS_MAX_TOPICS: usize = 4096;

/// Token slices on the device (see [`crate::lda::Tokens`]).
#[derive(Clone, Copy, Debug)]
pub struct DeviceTokens<'a> {
    /// Local document row of each token.
    pub docs: &'a CudaSlice<u32>,
    /// Global word id of each token.
    pub words: &'a CudaSlice<u32>,
}

/// Read-only count tables on the device (see [`crate::lda::Counts`]).
#[derive(Clone, Copy, Debug)]
pub struct DeviceCounts<'a> {
    /// `docs × K` document–topic counts.
    pub doc_topic: &'a CudaSlice<u32>,
    /// `rows × K` word–topic counts; row `r` is word `word_base + r`.
    pub word_topic: &'a CudaSlice<u32>,
    /// Global id of the word in row 0 of `word_topic`.
    pub word_base: u32,
    /// `K` topic totals.
    pub topic_totals: &'a CudaSlice<u32>,
}

/// Mutable count tables on the device (see [`crate::lda::CountsMut`]).
#[derive(Debug)]
pub struct DeviceCountsMut<'a> {
    /// `docs × K` document–topic counts.
    pub doc_topic: &'a mut CudaSlice<u32>,
    /// `rows × K` word–topic counts; row `r` is word `word_base + r`.
    pub word_topic: &'a mut CudaSlice<u32>,
    /// Global id of the word in row 0 of `word_topic`.
    pub word_base: u32,
    /// `K` topic totals.
    pub topic_totals: &'a mut CudaSlice<u32>,
}

/// Shapes of a validated token set.
struct Shape {
    n: usize,
    doc_rows: usize,
    word_lo: u64,
    word_hi: u64,
}

/// Host-side checks shared by both wrappers (lengths, params, devices).
fn validate_host(
    gpu: &Gpu,
    params: &LdaParams,
    tokens: DeviceTokens<'_>,
    topics: &CudaSlice<u32>,
    counts: DeviceCounts<'_>,
) -> Result<Shape, KernelError> {
    let DeviceCounts {
        doc_topic,
        word_topic,
        word_base,
        topic_totals: totals,
    } = counts;
    params.validate()?;
    let k = params.topics;
    let n = tokens.docs.len();
    check_len("words", n, tokens.words.len())?;
    check_len("topics", n, topics.len())?;
    check_len("topic_totals", k, totals.len())?;
    let doc_rows = doc_topic.len() / k;
    check_len("doc_topic", doc_rows * k, doc_topic.len())?;
    let word_rows = word_topic.len() / k;
    check_len("word_topic", word_rows * k, word_topic.len())?;
    check_device(gpu, "docs", tokens.docs)?;
    check_device(gpu, "words", tokens.words)?;
    check_device(gpu, "topics", topics)?;
    check_device(gpu, "doc_topic", doc_topic)?;
    check_device(gpu, "word_topic", word_topic)?;
    check_device(gpu, "topic_totals", totals)?;
    let word_lo = u64::from(word_base);
    let word_hi = (word_lo + word_rows as u64).min(params.vocab as u64);
    Ok(Shape {
        n,
        doc_rows,
        word_lo,
        word_hi,
    })
}

/// Splits a bad-input key `(kind << 56) | position`.
fn split_key(key: u64) -> (u64, usize) {
    (key >> 56, (key & ((1u64 << 56) - 1)) as usize)
}

/// Runs a check kernel that `atomicMin`s a bad-input key into a fresh `u64` flag, waits
/// for it, and returns the key found (`None` when everything passed).
pub(crate) fn first_bad(
    gpu: &Gpu,
    launch: impl FnOnce(&mut CudaSlice<u64>) -> Result<(), KernelError>,
) -> Result<Option<(u64, usize)>, KernelError> {
    let mut flag = gpu.upload(&[u64::MAX])?;
    launch(&mut flag)?;
    let key = gpu.download(&flag)?;
    Ok(key
        .first()
        .copied()
        .filter(|&k| k != u64::MAX)
        .map(split_key))
}

/// One element of a device buffer, as `u64` (for error reports).
pub(crate) fn value_at(
    gpu: &Gpu,
    buf: &CudaSlice<u32>,
    position: usize,
) -> Result<u64, KernelError> {
    let v = gpu
        .stream()
        .clone_dtoh(&buf.slice(position..position + 1))
        .map_err(driver_err("download bad value"))?;
    Ok(v.first().map_or(u64::MAX, |&x| u64::from(x)))
}

/// Checks every token's ids on the device; maps the first bad one to the CPU's error.
fn check_tokens(
    gpu: &Gpu,
    params: &LdaParams,
    tokens: DeviceTokens<'_>,
    topics: &CudaSlice<u32>,
    shape: &Shape,
) -> Result<(), KernelError> {
    if shape.n == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_lda_check_tokens")?;
    let bad = first_bad(gpu, |flag| {
        let (n, rows, lo, hi) = (
            shape.n as u64,
            shape.doc_rows as u64,
            shape.word_lo,
            shape.word_hi,
        );
        let k = params.topics as u32; // validate: topics <= u32::MAX
        let mut launch = gpu.stream().launch_builder(&f);
        launch
            .arg(tokens.docs)
            .arg(tokens.words)
            .arg(topics)
            .arg(&n)
            .arg(&rows)
            .arg(&lo)
            .arg(&hi)
            .arg(&k)
            .arg(&mut *flag);
        // SAFETY: arguments match (const u32*, const u32*, const u32*, u64, u64, u64, u64,
        // u32, u64*); the three token buffers hold n elements, flag one; the kernel reads
        // indices < n only.
        unsafe { launch.launch(gpu.grid_stride_config(shape.n)) }
            .map_err(driver_err("launch harp_lda_check_tokens"))?;
        Ok(())
    })?;
    let Some((kind, position)) = bad else {
        return Ok(());
    };
    let (what, buf) = match kind {
        0 => ("docs", tokens.docs),
        1 => ("words", tokens.words),
        _ => ("topics", topics),
    };
    Err(KernelError::IndexOutOfRange {
        what,
        position,
        index: value_at(gpu, buf, position)?,
    })
}

/// [`crate::lda::sample_parallel`] on the device: `new_topics[i]` ← token `i`'s topic
/// sampled from the fixed counts with its own assignment excluded, using `uniforms[i]`.
///
/// # Errors
/// As the CPU version (same variants, same first bad position), plus
/// [`KernelError::Cuda`] if a buffer is on another device or a launch fails and
/// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use if the
/// kernels cannot be compiled. On error `new_topics` is untouched.
pub fn sample_parallel(
    gpu: &Gpu,
    params: &LdaParams,
    tokens: DeviceTokens<'_>,
    topics: &CudaSlice<u32>,
    counts: DeviceCounts<'_>,
    uniforms: &CudaSlice<f32>,
    new_topics: &mut CudaSlice<u32>,
) -> Result<(), KernelError> {
    let shape = validate_host(gpu, params, tokens, topics, counts)?;
    let n = shape.n;
    check_device(gpu, "uniforms", uniforms)?;
    check_device(gpu, "new_topics", new_topics)?;
    check_tokens(gpu, params, tokens, topics, &shape)?;
    check_len("uniforms", n, uniforms.len())?;
    check_len("new_topics", n, new_topics.len())?;
    if n == 0 {
        return Ok(());
    }
    let check = gpu.function(&SOURCE, "harp_lda_check_uniforms")?;
    let bad = first_bad(gpu, |flag| {
        let n64 = n as u64;
        let mut launch = gpu.stream().launch_builder(&check);
        launch.arg(uniforms).arg(&n64).arg(&mut *flag);
        // SAFETY: arguments match (const float*, u64, u64*); uniforms holds n floats.
        unsafe { launch.launch(gpu.grid_stride_config(n)) }
            .map_err(driver_err("launch harp_lda_check_uniforms"))?;
        Ok(())
    })?;
    if let Some((_, position)) = bad {
        return Err(KernelError::InvalidValue {
            what: "uniforms",
            position,
        });
    }

    let f = gpu.function(&SOURCE, "harp_lda_sample_parallel")?;
    let (n64, k, base) = (n as u64, params.topics as u32, counts.word_base);
    let (alpha, beta, vbeta) = (params.alpha, params.beta, params.vbeta());
    let mut launch = gpu.stream().launch_builder(&f);
    launch
        .arg(tokens.docs)
        .arg(tokens.words)
        .arg(topics)
        .arg(uniforms)
        .arg(counts.doc_topic)
        .arg(counts.word_topic)
        .arg(counts.topic_totals)
        .arg(&mut *new_topics)
        .arg(&n64)
        .arg(&k)
        .arg(&base)
        .arg(&alpha)
        .arg(&beta)
        .arg(&vbeta);
    // One warp (32 threads) per token; BLOCK_THREADS is a multiple of 32.
    let cfg = gpu.grid_stride_config(n.saturating_mul(32));
    // SAFETY: arguments match the kernel's signature (7 const pointers, u32*, u64, u32,
    // u32, float, float, float). Every token was checked on the device: doc < doc rows,
    // word_base <= word < word_base + word rows, topic < K, so every row read is inside
    // doc_topic / word_topic; totals has K entries; new_topics holds n.
    unsafe { launch.launch(cfg) }.map_err(driver_err("launch harp_lda_sample_parallel"))?;
    Ok(())
}

/// [`crate::lda::rebuild_counts`] on the device: zeroes the three tables and adds every
/// token (atomics; topic totals through a per-block shared-memory histogram for
/// `K <= 4096`).
///
/// # Errors
/// As the CPU version, plus [`KernelError::Cuda`] / [`KernelError::NvrtcUnavailable`] /
/// [`KernelError::CudaCompile`] as for [`sample_parallel`]. On error nothing is written.
pub fn rebuild_counts(
    gpu: &Gpu,
    params: &LdaParams,
    tokens: DeviceTokens<'_>,
    topics: &CudaSlice<u32>,
    counts: DeviceCountsMut<'_>,
) -> Result<(), KernelError> {
    let view = DeviceCounts {
        doc_topic: counts.doc_topic,
        word_topic: counts.word_topic,
        word_base: counts.word_base,
        topic_totals: counts.topic_totals,
    };
    let shape = validate_host(gpu, params, tokens, topics, view)?;
    check_tokens(gpu, params, tokens, topics, &shape)?;
    if u32::try_from(shape.n).is_err() {
        return Err(KernelError::ShapeOverflow { what: "tokens" });
    }
    let DeviceCountsMut {
        doc_topic,
        word_topic,
        word_base,
        topic_totals,
    } = counts;
    let stream = gpu.stream();
    stream
        .memset_zeros(doc_topic)
        .map_err(driver_err("memset doc_topic"))?;
    stream
        .memset_zeros(word_topic)
        .map_err(driver_err("memset word_topic"))?;
    stream
        .memset_zeros(topic_totals)
        .map_err(driver_err("memset topic_totals"))?;
    if shape.n == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_lda_count_tokens")?;
    let k = params.topics;
    let shared = k <= SHARED_TOTALS_MAX_TOPICS;
    let base = gpu.grid_stride_config(shape.n);
    let cfg = LaunchConfig {
        shared_mem_bytes: if shared { (k * 4) as u32 } else { 0 },
        ..base
    };
    let (n64, k32, shared_flag) = (shape.n as u64, k as u32, i32::from(shared));
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(tokens.docs)
        .arg(tokens.words)
        .arg(topics)
        .arg(&n64)
        .arg(&k32)
        .arg(&word_base)
        .arg(&mut *doc_topic)
        .arg(&mut *word_topic)
        .arg(&mut *topic_totals)
        .arg(&shared_flag);
    // SAFETY: arguments match (3 const u32*, u64, u32, u32, 3 u32*, int); every token
    // was checked on the device, so every counter index is inside its table; the
    // shared histogram has K entries when enabled (K * 4 <= 16 KiB).
    unsafe { launch.launch(cfg) }.map_err(driver_err("launch harp_lda_count_tokens"))?;
    Ok(())
}
